/**
 * The store on PostgreSQL: one table of Deno KV entries (migrations.ts) with Deno KV's
 * semantics (backend.ts). Every atomic write is one call of `kv_commit`, one statement and so
 * one transaction, whose advisory locks on the touched keys make its checks and mutations
 * atomic against every other process on every machine. Expired rows are never returned
 * (every read compares `expires_at` with the database's clock) and a background sweep deletes
 * them.
 *
 * Driver errors that mean "the database cannot answer now" become StoreUnavailableError
 * (a 503 with Retry-After); the driver reconnects by itself once the database is back, and a
 * pool wedged by connections that will never answer is replaced (pool.ts). A read that finds
 * its connection dead (a failover that moved the database's address to another host, which
 * resets the old connections when they are next used) is sent again, on the next connection,
 * until a fresh one answers: reads change nothing. Writes are not: one may have committed.
 */

import { sha256 } from "@noble/hashes/sha2.js";
import type { KvBackend } from "../backend.ts";
import { StoreUnavailableError } from "../backend.ts";
import type { CommitOutcome, PlannedWrite } from "../group_commit.ts";
import { decodeKey, encodeKey, prefixEnd, prefixStart } from "./key_codec.ts";
import { migrate } from "./migrate.ts";
import { decodeValue, encodeValue } from "./value_codec.ts";
import {
  DEFAULT_CONNECT_TIMEOUT_SECONDS,
  DEFAULT_STATEMENT_TIMEOUT_MS,
  type PostgresOptions,
  type Sql,
} from "./connect.ts";
import { createPool, type Pool } from "./pool.ts";

export type { PostgresOptions } from "./connect.ts";

/** A KvBackend on PostgreSQL. */
export interface PostgresBackend extends KvBackend {
  /** Always answers, with a statement that writes nothing. */
  writable(): Promise<boolean>;
  /** Deletes expired rows now (at most `limit`); returns how many. */
  sweepExpired(limit?: number): Promise<number>;
  close(): Promise<void>;
}

const DEFAULT_SWEEP_INTERVAL_MS = 60_000;
const SWEEP_BATCH = 1_000;
/** Batches one sweep may run: 100,000 rows a minute per process at most. */
const SWEEP_BATCHES_PER_ROUND = 100;
const DEFAULT_PAGE = 500;
/** The expression of an entry that is not expired. */
const LIVE = "(expires_at IS NULL OR expires_at > kv_now())";

/** Connects, applies pending migrations, and starts the sweep. Throws when it cannot. */
export async function openPostgresBackend(options: PostgresOptions): Promise<PostgresBackend> {
  const pool = createPool({
    ...options,
    statementTimeoutMs: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
    connectTimeoutSeconds: options.connectTimeoutSeconds ?? DEFAULT_CONNECT_TIMEOUT_SECONDS,
  });
  try {
    if (options.existingOnly) await pool.run(requireStore);
    await unavailableOnFailure(() => pool.run(migrate));
  } catch (error) {
    await pool.end(1);
    throw error;
  }
  return createBackend(
    pool,
    options.poolSize,
    options.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS,
  );
}

function createBackend(pool: Pool, poolSize: number, sweepIntervalMs: number): PostgresBackend {
  // Each dead connection fails one attempt and leaves the pool: one more reaches a fresh one.
  const read: Pool["run"] = (statement) => readRetrying(pool, poolSize + 1, statement);
  const sweep = (limit = SWEEP_BATCH) =>
    unavailableOnFailure(() => pool.run((sql) => sweepExpired(sql, limit)));
  const timer = sweepIntervalMs > 0
    ? setInterval(
      () => sweepRound(sweep).catch(() => {/* tried again at the next interval */}),
      sweepIntervalMs,
    )
    : undefined;
  if (timer !== undefined) Deno.unrefTimer(timer);
  let closing: Promise<void> | undefined;
  return {
    getMany: (keys) => unavailableOnFailure(() => read((sql) => getMany(sql, keys))),
    list: (selector, options) => list(read, selector, options),
    writable: () => unavailableOnFailure(() => read(isWritable)),
    commit: (write) => unavailableOnFailure(() => pool.run((sql) => commit(sql, write))),
    sweepExpired: sweep,
    close() {
      clearInterval(timer);
      return closing ??= pool.end(5);
    },
  };
}

async function getMany(
  sql: Sql,
  keys: readonly Deno.KvKey[],
): Promise<Deno.KvEntryMaybe<unknown>[]> {
  const encoded = keys.map(encodeKey);
  const rows = await sql.unsafe<Row[]>(
    `SELECT key, value, versionstamp FROM kv
     WHERE key IN (SELECT decode(k, 'hex') FROM unnest($1::text[]) AS k) AND ${LIVE}`,
    [encoded.map(hex)],
  );
  const found = new Map(rows.map((row) => [hex(row.key), row]));
  return keys.map((key, i) => {
    const row = found.get(hex(encoded[i]));
    return row
      ? { key, value: decodeValue(row.value), versionstamp: row.versionstamp }
      : { key, value: null, versionstamp: null };
  });
}

type SetMutation = Extract<Deno.KvMutation, { type: "set" }>;

interface Row {
  key: Uint8Array;
  value: Uint8Array;
  versionstamp: string;
}

/** Pages through the range by key, so a long list holds no transaction or cursor open. */
async function* list<T>(
  read: Pool["run"],
  selector: Deno.KvListSelector,
  options: { limit?: number; batchSize?: number; reverse?: boolean } = {},
): AsyncGenerator<Deno.KvEntry<T>> {
  if (options.reverse) throw new TypeError("reverse lists are not supported on PostgreSQL");
  let [start, end] = rangeOf(selector);
  let left = options.limit ?? Infinity;
  const page = Math.min(options.batchSize ?? DEFAULT_PAGE, 1000);
  let inclusive = true;
  while (left > 0) {
    const rows = await unavailableOnFailure(() =>
      read((sql) =>
        sql.unsafe<Row[]>(
          `SELECT key, value, versionstamp FROM kv
         WHERE key ${inclusive ? ">=" : ">"} decode($1, 'hex') AND key < decode($2, 'hex')
           AND ${LIVE}
         ORDER BY key LIMIT $3`,
          [hex(start), hex(end), Math.min(page, left)],
        )
      )
    );
    for (const row of rows) {
      yield {
        key: decodeKey(row.key),
        value: decodeValue(row.value) as T,
        versionstamp: row.versionstamp,
      };
    }
    left -= rows.length;
    if (rows.length < Math.min(page, left + rows.length)) return;
    start = rows[rows.length - 1].key;
    inclusive = false;
  }
}

/** [start inclusive, end exclusive) of a Deno KV list selector. */
function rangeOf(selector: Deno.KvListSelector): [Uint8Array, Uint8Array] {
  if ("prefix" in selector) {
    const prefix = encodeKey(selector.prefix);
    const start = "start" in selector ? encodeKey(selector.start) : prefixStart(prefix);
    const end = "end" in selector ? encodeKey(selector.end) : prefixEnd(prefix);
    return [start, end];
  }
  return [encodeKey(selector.start), encodeKey(selector.end)];
}

async function commit(sql: Sql, write: PlannedWrite): Promise<CommitOutcome> {
  const finalByKey = new Map<string, Deno.KvMutation>();
  for (const mutation of write.mutations) {
    if (mutation.type !== "set" && mutation.type !== "delete") {
      throw new TypeError(`mutation ${mutation.type} is not supported on PostgreSQL`);
    }
    // Later mutations of a key replace earlier ones, as when Deno applies them in order.
    const id = hex(encodeKey(mutation.key));
    finalByKey.delete(id);
    finalByKey.set(id, mutation);
  }
  const sets: [string, SetMutation][] = [];
  for (const [id, mutation] of finalByKey) {
    if (mutation.type === "set") sets.push([id, mutation]);
  }
  const deletes = [...finalByKey].filter(([, m]) => m.type === "delete").map(([id]) => id);
  const checkKeys = write.checks.map((check) => encodeKey(check.key));
  const lockIds = [...new Set([...checkKeys.map(hex), ...finalByKey.keys()].map(lockId))]
    .sort(compare);
  const [{ stamp }] = await sql.unsafe<{ stamp: string | null }[]>(
    "SELECT kv_commit($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[]) AS stamp",
    [
      lockIds.map(String),
      checkKeys.map(hex),
      write.checks.map((check) => check.versionstamp),
      deletes,
      sets.map(([id]) => id),
      sets.map(([, m]) => hex(encodeValue(m.value))),
      sets.map(([, m]) =>
        m.expireIn === undefined ? null : String(Math.max(1, Math.ceil(m.expireIn)))
      ),
    ] as never,
  );
  return stamp === null ? { ok: false } : { ok: true, versionstamp: stamp };
}

/**
 * Whether the database takes writes now, asked without writing: a standby (a failover that
 * left the service on one) and `default_transaction_read_only` both make it refuse them.
 */
async function isWritable(sql: Sql): Promise<boolean> {
  const [{ writable }] = await sql.unsafe<{ writable: boolean }[]>(
    "SELECT current_setting('transaction_read_only') = 'off' AS writable",
  );
  return writable;
}

/** Throws when the database has no store of ours (no migration was ever applied to it). */
async function requireStore(sql: Sql): Promise<void> {
  const [{ found }] = await unavailableOnFailure(() =>
    sql.unsafe<{ found: boolean }[]>(
      "SELECT to_regclass('schema_migrations') IS NOT NULL AND to_regclass('kv') IS NOT NULL AS found",
    )
  );
  if (!found) {
    throw new Error(
      "this database holds no store of the service (no kv table): point DATABASE_URL at the " +
        "service's database, or run `admin migrate` to set up a new one",
    );
  }
}

async function sweepExpired(sql: Sql, limit: number): Promise<number> {
  // Checked again on the row deleted: one rewritten live (a lease taken anew) while the sweep
  // waited for it is the new row, and under READ COMMITTED only this condition is re-read.
  const result = await sql.unsafe(
    `DELETE FROM kv WHERE key IN (
       SELECT key FROM kv WHERE expires_at <= kv_now() ORDER BY expires_at LIMIT $1
     ) AND expires_at <= kv_now()`,
    [limit],
  );
  return result.count;
}

/**
 * One sweep: batches until one finds fewer than a batch of expired rows, at most
 * SWEEP_BATCHES_PER_ROUND of them, so that a backlog is worked off rather than outgrowing a
 * batch a minute.
 */
async function sweepRound(sweep: (limit?: number) => Promise<number>): Promise<void> {
  for (let i = 0; i < SWEEP_BATCHES_PER_ROUND; i++) {
    if (await sweep() < SWEEP_BATCH) return;
  }
}

/** The advisory lock a commit that checks or changes `key` holds while it runs. */
export function advisoryLockOf(key: Deno.KvKey): bigint {
  return lockId(hex(encodeKey(key)));
}

/** The advisory lock of a key (hex of its encoding): 64 bits of its SHA-256, signed. */
function lockId(keyHex: string): bigint {
  const digest = sha256(new TextEncoder().encode(keyHex));
  return new DataView(digest.buffer, digest.byteOffset, 8).getBigInt64(0);
}

function compare(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Hex digits of `bytes`: a key's identity in maps. */
function hex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0");
  return out;
}

/** SQLSTATE classes and driver codes that mean "not now", not "wrong". */
const UNAVAILABLE_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EPIPE",
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_DESTROYED",
  "CONNECTION_ENDED",
  "57P01", // admin_shutdown
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now
  "57014", // query_canceled (statement_timeout)
  "55P03", // lock_not_available (a role's lock_timeout: a lock wait, as statement_timeout's)
  "25006", // read_only_sql_transaction (a failover that lands on a standby)
  "40001", // serialization_failure
  "40003", // statement_completion_unknown (a lost answer, as a dropped connection's)
  "40P01", // deadlock_detected
]);

/**
 * Errors of a connection found dead when used (reset, closed under the statement, its server
 * process ended): another connection may answer at once.
 */
const DEAD_CONNECTION_CODES = new Set(["ECONNRESET", "EPIPE", "CONNECTION_CLOSED", "57P01"]);

/** Runs a read, again on a dead connection's error, at most `attempts` times in all. */
async function readRetrying<T>(
  pool: Pool,
  attempts: number,
  statement: (sql: Sql) => Promise<T>,
): Promise<T> {
  for (let attempt = 1;; attempt++) {
    try {
      return await pool.run(statement);
    } catch (error) {
      const code = (error as { code?: unknown })?.code;
      if (attempt >= attempts || !DEAD_CONNECTION_CODES.has(code as string)) throw error;
    }
  }
}

/** SQLSTATE classes that mean "not now": 08 connection exception, 53 insufficient resources. */
const UNAVAILABLE_CLASSES = ["08", "53"];

/** Runs `operation`; an error that means the database cannot answer now is rethrown as such. */
export async function unavailableOnFailure<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (!isUnavailable(error)) throw error;
    throw new StoreUnavailableError(`PostgreSQL unavailable: ${describe(error)}`, { cause: error });
  }
}

function isUnavailable(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return typeof code === "string" &&
    (UNAVAILABLE_CODES.has(code) || UNAVAILABLE_CLASSES.includes(code.slice(0, 2)));
}

function describe(error: unknown): string {
  const { code, message } = error as { code?: string; message?: string };
  return `${code ?? "error"} ${message ?? String(error)}`;
}
