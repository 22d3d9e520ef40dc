/**
 * How every record module reaches KV: reads through the group read, writes through the group
 * commit, "database is locked" retried (a lock held past the retries is the storage
 * unavailable), each bounded by the request's database deadline
 * (deadline.ts), and expiry judged by the injected clock. Deno deletes
 * expired entries only some time after `expireIn`, so every read also checks the record's
 * `expiresAt`; `expireIn` only collects garbage.
 */

import type { Clock } from "../clock.ts";
import { backendOf, type StoreDatabase, StoreUnavailableError } from "./backend.ts";
import {
  AtomicWrite,
  createGroupCommit,
  type ExecuteWrite,
  type PlannedWrite,
} from "./group_commit.ts";
import { createGroupRead } from "./group_read.ts";
import { isLocked, LOCKED_RETRY_BUDGET_MS, retryLocked } from "./locked_retry.ts";
import type { StoreDeadline } from "./deadline.ts";

/** A record as read, with what is needed to change it atomically later. */
export interface Versioned<T> {
  readonly key: Deno.KvKey;
  readonly value: T;
  readonly versionstamp: string;
}

/** The KV operations the record modules share. */
export interface StoreIo {
  clock: Clock;
  /** The entry at `key`, or null. */
  read<T>(key: Deno.KvKey): Promise<Versioned<T> | null>;
  /** The entries at `keys`, in their order, read as one snapshot. */
  readMany(keys: Deno.KvKey[]): Promise<(Versioned<unknown> | null)[]>;
  /** Every entry under `prefix`, in key order, read in pages (not one snapshot). */
  list<T>(prefix: Deno.KvKey): AsyncIterable<Versioned<T>>;
  /** At most `limit` entries in `selector`'s range, in key order. */
  listRange<T>(selector: Deno.KvListSelector, limit: number): Promise<Versioned<T>[]>;
  /** A write that joins the group commit when committed. */
  atomic(): AtomicWrite;
  /** Commits `op`; false when one of its checks failed. */
  commit(op: AtomicWrite): Promise<boolean>;
  /**
   * Whether the database takes writes now (true where it cannot say); `probe` is a key it may
   * set and delete to find out (backend.ts).
   */
  writable(probe: Deno.KvKey): Promise<boolean>;
  /** Whether the database's file is no longer at its path (false where it has none). */
  replaced(): Promise<boolean>;
  /** `expireIn` for a record that lives until `expiresAt` (at least 1 ms). */
  ttlUntil(expiresAt: number): number;
  /** Whether a record is not yet past its `expiresAt`. */
  isLive(record: { expiresAt: number }): boolean;
}

/** The largest page Deno KV's list reads at once. */
const LIST_PAGE_SIZE = 1000;

/**
 * The shared KV access over an open database (Deno KV or another backend) and a clock, every
 * operation within `deadline`; `observeCommit` times each commit.
 */
export function createStoreIo(
  database: StoreDatabase,
  clock: Clock,
  deadline: StoreDeadline,
  observeCommit?: (ms: number) => void,
): StoreIo {
  const kv = backendOf(database);
  const groupRead = createGroupRead((keys) => lockedRetried(() => kv.getMany(keys)));
  const getMany = (keys: Deno.KvKey[]) => deadline.bound((caller) => groupRead(keys, caller));
  const groupCommit = createGroupCommit(
    timed(observeCommit, (write) => lockedRetried(() => kv.commit(write))),
  );
  const submit = (write: PlannedWrite) => deadline.bound((caller) => groupCommit(write, caller));
  return {
    clock,
    async read<T>(key: Deno.KvKey) {
      const [entry] = await getMany([key]);
      return versioned(entry as Deno.KvEntryMaybe<T>);
    },
    async readMany(keys) {
      return (await getMany(keys)).map(versioned);
    },
    list: <T>(prefix: Deno.KvKey) =>
      boundPages(deadline, kv.list<T>({ prefix }, { batchSize: LIST_PAGE_SIZE })),
    listRange<T>(selector: Deno.KvListSelector, limit: number) {
      return deadline.bound(() =>
        lockedRetried(() => Array.fromAsync(kv.list<T>(selector, { limit })))
      );
    },
    atomic: () => new AtomicWrite(submit),
    async commit(op) {
      return (await op.commit()).ok;
    },
    writable: (probe) => deadline.bound(() => kv.writable?.(probe) ?? Promise.resolve(true)),
    replaced: () => kv.replaced?.() ?? Promise.resolve(false),
    ttlUntil: (expiresAt) => expireInOf(expiresAt - clock.now()),
    isLive: (record) => clock.now() <= record.expiresAt,
  };
}

/**
 * `operation`, tried again while SQLite says the database is locked. A lock held past the
 * retries is held by another process for long (the operator's CLI in a long operation, a backup
 * tool, a `sqlite3` shell in `BEGIN EXCLUSIVE`): the storage is unavailable, not the service
 * failing, so it is StoreUnavailableError (503 with `Retry-After`); what met it was not applied.
 */
async function lockedRetried<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await retryLocked(operation);
  } catch (error) {
    if (!isLocked(error) || error instanceof StoreUnavailableError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    throw new StoreUnavailableError(
      `KV file locked by another process for over ${LOCKED_RETRY_BUDGET_MS} ms: ${message}`,
      { cause: error },
    );
  }
}

/** Longest `expireIn` given to the store: ten years (its own limit is far above, but finite). */
const MAX_EXPIRE_IN_MS = 10 * 366 * 24 * 3600 * 1000;

/** `expireIn` for what is left of a record's life: whole milliseconds, at least 1, bounded. */
function expireInOf(leftMs: number): number {
  if (!(leftMs < MAX_EXPIRE_IN_MS)) return MAX_EXPIRE_IN_MS;
  return Math.max(1, Math.ceil(leftMs));
}

/** `commit`, telling `observe` how long each call took (failed ones too). */
function timed(
  observe: ((ms: number) => void) | undefined,
  commit: ExecuteWrite,
): ExecuteWrite {
  if (!observe) return commit;
  return async (write) => {
    const started = performance.now();
    try {
      return await commit(write);
    } finally {
      observe(performance.now() - started);
    }
  };
}

/** `entries`, each step (a page read, most often none) within `deadline`. */
function boundPages<T>(deadline: StoreDeadline, entries: AsyncIterable<T>): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator]() {
      const iterator = entries[Symbol.asyncIterator]();
      return {
        next: () => deadline.bound(() => iterator.next()),
        return: async (value?: unknown) =>
          await iterator.return?.(value) ?? { done: true, value: undefined },
      };
    },
  };
}

/** An entry that exists, as a Versioned record; null for an absent one. */
function versioned<T>(entry: Deno.KvEntryMaybe<T>): Versioned<T> | null {
  return entry.versionstamp === null
    ? null
    : { key: entry.key, value: entry.value, versionstamp: entry.versionstamp };
}
