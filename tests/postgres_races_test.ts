/**
 * The PostgreSQL store's own races and upkeep, against a real cluster: the expiry sweep never
 * deletes a row rewritten live while it waited, works off a backlog, and checked writes hold
 * whatever default isolation the database or role has (the store asks for READ COMMITTED).
 * Found by a review of the store; each test fails on the code before its fix.
 */
import assert from "node:assert/strict";
import { sha256 } from "@noble/hashes/sha2.js";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";
import { openPostgresBackend, type PostgresBackend } from "../src/store/postgres/backend.ts";
import { connect } from "../src/store/postgres/connect.ts";
import { encodeKey } from "../src/store/postgres/key_codec.ts";
import { encodeValue } from "../src/store/postgres/value_codec.ts";
import { createStore } from "../src/store/mod.ts";
import { createSecretBox } from "../src/secret_box.ts";
import { systemClock } from "../src/clock.ts";
import { TEST_SECRET } from "./_helpers.ts";

const hex = (bytes: Uint8Array) =>
  Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");

/** The advisory lock kv_commit takes for a key, as the backend computes it. */
function lockId(keyHex: string): bigint {
  const digest = sha256(new TextEncoder().encode(keyHex));
  return new DataView(digest.buffer, digest.byteOffset, 8).getBigInt64(0);
}

/**
 * Runs one kv_commit on `sql` in a transaction held open after it: `ran` resolves with its
 * versionstamp once it ran (its locks taken, its rows written), `commit()` ends the transaction.
 */
function heldCommit(sql: ReturnType<typeof connect>, statement: string, params: unknown[]) {
  const { promise: released, resolve: commit } = Promise.withResolvers<void>();
  const { promise: ran, resolve: hasRun } = Promise.withResolvers<unknown>();
  const committed = sql.begin(async (tx) => {
    const [row] = await tx.unsafe(statement, params as never);
    hasRun(row?.stamp);
    await released;
  });
  return { ran, commit: async () => (commit(), await committed) };
}

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({
    name: `postgres: ${name}`,
    ignore: ignorePostgresTests,
    sanitizeResources: false,
    sanitizeOps: false,
    fn,
  });

test("the expiry sweep works off a backlog of expired rows, not a batch a minute", async () => {
  const cluster = await sharedPostgres();
  const url = await cluster.createDatabase();
  const backend = await openPostgresBackend({ url, poolSize: 2, sweepIntervalMs: 300 });
  try {
    const mutations: Deno.KvMutation[] = [];
    for (let i = 0; i < 6000; i++) {
      mutations.push({ type: "set", key: ["rate", "x", `ip${i}`, 1], value: 1, expireIn: 1 });
    }
    for (let i = 0; i < 6000; i += 500) {
      await backend.commit({ checks: [], mutations: mutations.slice(i, i + 500) });
    }
    await new Promise((r) => setTimeout(r, 1000)); // three sweep intervals (3 x 300 ms)
    const sql = connect({ url, poolSize: 1 });
    const [{ n }] = await sql`SELECT count(*)::int AS n FROM kv WHERE expires_at <= kv_now()`;
    await sql.end();
    assert.equal(n, 0, `expired rows left after 3 sweeps of a 6,000-row backlog: ${n}`);
  } finally {
    await backend.close();
  }
});

test("under a database default of repeatable read, 40 racing counts each get their own number", async () => {
  const cluster = await sharedPostgres();
  const url = await cluster.createDatabase();
  const name = new URL(url).pathname.slice(1);
  await cluster.psql(
    `ALTER DATABASE ${name} SET default_transaction_isolation = 'repeatable read'`,
  );
  const backends: PostgresBackend[] = [];
  try {
    for (let i = 0; i < 4; i++) {
      backends.push(await openPostgresBackend({ url, poolSize: 4, sweepIntervalMs: 0 }));
    }
    const stores = backends.map((b) => createStore(b, systemClock, createSecretBox([TEST_SECRET])));
    const errors: string[] = [];
    const counts = await Promise.all(
      Array.from(
        { length: 40 },
        (_, i) =>
          stores[i % 4].countRequest("token", "1.2.3.4", 1000, 600_000).catch((e) => {
            errors.push(`${e.name}: ${e.message}`);
            return -1;
          }),
      ),
    );
    assert.deepEqual(
      errors,
      [],
      `requests that failed instead of retrying: ${errors.length}; first: ${errors[0]}`,
    );
    assert.equal(new Set(counts).size, 40);
  } finally {
    for (const b of backends) await b.close();
  }
});

for (const isolation of ["repeatable read", "serializable"]) {
  test(`under a database default of ${isolation}, a session deleted while a checked save waits stays deleted`, async () => {
    const cluster = await sharedPostgres();
    const url = await cluster.createDatabase();
    const name = new URL(url).pathname.slice(1);
    await cluster.psql(`ALTER DATABASE ${name} SET default_transaction_isolation = '${isolation}'`);
    const backend = await openPostgresBackend({ url, poolSize: 4, sweepIntervalMs: 0 });
    const revoker = connect({ url, poolSize: 1 });
    try {
      const key = ["session", "s1"];
      const written = await backend.commit({
        checks: [],
        mutations: [{ type: "set", key, value: { v: 1 } }],
      });
      assert.ok(written.ok);
      const [read] = await backend.getMany([key]);
      // Instance A revokes the session: its kv_commit holds the key's lock until its COMMIT.
      const k = hex(encodeKey(key));
      const revocation = heldCommit(
        revoker,
        "SELECT kv_commit($1::bigint[], '{}', '{}', $2::text[], '{}', '{}', '{}')",
        [[String(lockId(k))], [k]],
      );
      await revocation.ran;
      // Instance B saves the session it read before the revocation (a rotation, an upstream refresh).
      const save = backend.commit({
        checks: [{ key, versionstamp: read.versionstamp }],
        mutations: [{ type: "set", key, value: { v: 2 } }],
      })
        .catch((e) => ({ ok: false, error: String(e) }));
      await new Promise((r) => setTimeout(r, 300)); // B has taken its snapshot and waits on the lock
      await revocation.commit();
      const outcome = await save;
      const [after] = await backend.getMany([key]);
      assert.equal(
        after.versionstamp,
        null,
        `revoked session is back: save answered ${JSON.stringify(outcome)}, row ${
          JSON.stringify(after.value)
        }`,
      );
    } finally {
      await revoker.end();
      await backend.close();
    }
  });
}

test("the expiry sweep never deletes a row rewritten live while it waited for it", async () => {
  const cluster = await sharedPostgres();
  const url = await cluster.createDatabase();
  const backend = await openPostgresBackend({ url, poolSize: 4, sweepIntervalMs: 0 });
  const writer = connect({ url, poolSize: 1 });
  try {
    // A lease (or pause, repeat, budget record) that expired and is still in the table.
    const key = ["lease", "upstream-refresh", "s1"];
    await backend.commit({
      checks: [],
      mutations: [{ type: "set", key, value: { expiresAt: 0 }, expireIn: 1 }],
    });
    await new Promise((r) => setTimeout(r, 20));
    // Another instance takes the lease again: kv_commit treats the expired row as absent and upserts it.
    const k = hex(encodeKey(key));
    const take = heldCommit(
      writer,
      "SELECT kv_commit($1::bigint[], $2::text[], $3::text[], '{}', $2::text[], $4::text[], $5::bigint[]) AS stamp",
      [[String(lockId(k))], [k], [null], [hex(encodeValue({ expiresAt: Date.now() + 30_000 }))], [
        "30000",
      ]],
    );
    assert.ok(await take.ran, "the lease was taken");
    const sweeping = backend.sweepExpired(); // selects the old, expired version
    await new Promise((r) => setTimeout(r, 300));
    await take.commit(); // the commit of the lease's transaction came a moment later
    const swept = await sweeping;
    const [after] = await backend.getMany([key]);
    assert.notEqual(
      after.versionstamp,
      null,
      `a 30 s lease taken a moment ago is gone (sweep deleted ${swept})`,
    );
  } finally {
    await writer.end();
    await backend.close();
  }
});
