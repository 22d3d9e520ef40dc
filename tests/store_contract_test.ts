/**
 * The store's contract, run against every backend (Deno KV and PostgreSQL): what io.ts asks of
 * a database (snapshot reads, ordered prefix and range lists, checked atomic writes, expiry), and
 * the races the service's guarantees rest on, through the real app: a code is redeemed once, a
 * refresh token rotates once, a flow completes once, one GitLab refresh per lease, rate-limit
 * counts shared by two store instances (two processes' worth of connections).
 */

import assert from "node:assert/strict";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import { backendOf, type KvBackend } from "../src/store/backend.ts";
import { createStore, type StoreDatabase } from "../src/store/mod.ts";
import { createSecretBox } from "../src/secret_box.ts";
import { systemClock } from "../src/clock.ts";
import { retryLocked } from "../src/store/locked_retry.ts";
import {
  assertOneComplete,
  assertOneWinner,
  countRecords,
  exchange,
  FakeClock,
  issueCode,
  issueTokens,
  makeTestAppOn,
  poll,
  refresh,
  startFlow,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { POSTGRES, STORE_KINDS, type StoreKind } from "./_stores.ts";
import type { PostgresBackend } from "../src/store/postgres/backend.ts";

const PARALLEL = 20;
const ROUNDS = 3;

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Runs `fn` on a fresh, empty store of `kind`, opened in this process. */
async function withDatabase(
  kind: StoreKind,
  fn: (database: StoreDatabase, again: () => Promise<StoreDatabase>) => Promise<void>,
): Promise<void> {
  const store = await kind.create();
  const opened = [await store.open()];
  try {
    await fn(opened[0].database, async () => {
      const another = await store.open();
      opened.push(another);
      return another.database;
    });
  } finally {
    for (const { close } of opened) await close();
    await store.dispose();
  }
}

/** Runs `fn` on the real app over a fresh store of `kind`. */
function withAppOn(kind: StoreKind, fn: (app: TestApp<StoreDatabase>) => Promise<void>) {
  return withDatabase(kind, async (database) => await fn(await makeTestAppOn(database)));
}

async function settle(responses: Response[]) {
  return await Promise.all(
    responses.map(async (response) => ({ status: response.status, body: await response.json() })),
  );
}

function set(key: Deno.KvKey, value: unknown, expireIn?: number): Deno.KvMutation {
  return expireIn === undefined
    ? { type: "set", key, value }
    : { type: "set", key, value, expireIn };
}

async function keysOf(kv: KvBackend, selector: Deno.KvListSelector, limit?: number) {
  return (await Array.fromAsync(kv.list(selector, { limit, batchSize: 2 }))).map((e) => e.key);
}

for (const kind of STORE_KINDS) {
  const test = (name: string, fn: () => Promise<void>) =>
    Deno.test({ name: `store contract [${kind.name}]: ${name}`, ignore: kind.ignore, fn });

  test("checked writes: absent, then versionstamp; a failed check writes nothing", () =>
    withDatabase(kind, async (database) => {
      const kv = backendOf(database);
      const created = await kv.commit({
        checks: [{ key: ["a"], versionstamp: null }],
        mutations: [set(["a"], { n: 1, bytes: new Uint8Array([0, 1, 255]) }), set(["b"], 2)],
      });
      assert.ok(created.ok);
      const [a, b, c] = await kv.getMany([["a"], ["b"], ["c"]]);
      assert.deepEqual(a.value, { n: 1, bytes: new Uint8Array([0, 1, 255]) });
      assert.equal(a.versionstamp, created.versionstamp);
      assert.equal(b.versionstamp, created.versionstamp, "one commit, one versionstamp");
      assert.deepEqual([c.value, c.versionstamp], [null, null]);

      const stale = await kv.commit({
        checks: [{ key: ["a"], versionstamp: null }],
        mutations: [set(["a"], "lost"), set(["c"], "lost")],
      });
      assert.deepEqual(stale, { ok: false });
      const updated = await kv.commit({
        checks: [{ key: ["a"], versionstamp: a.versionstamp }],
        mutations: [set(["a"], "second"), { type: "delete", key: ["b"] }],
      });
      assert.ok(updated.ok && updated.versionstamp > created.versionstamp!);
      const after = await kv.getMany([["a"], ["b"], ["c"]]);
      assert.deepEqual(after.map((e) => e.value), ["second", null, null]);
      assert.deepEqual(
        await kv.commit({ checks: [{ key: ["a"], versionstamp: a.versionstamp }], mutations: [] }),
        { ok: false },
        "an old versionstamp no longer matches",
      );
    }));

  test("lists: Deno KV's key order across part types, prefixes and ranges, in pages", () =>
    withDatabase(kind, async (database) => {
      const kv = backendOf(database);
      const keys: Deno.KvKey[] = [
        ["k"],
        ["k", new Uint8Array([1, 0])],
        ["k", ""],
        ["k", "a"],
        ["k", "a", 1],
        ["k", "a\u0000"],
        ["k", "b"],
        ["k", -2.5],
        ["k", -0], // a key of its own in Deno KV, before 0
        ["k", 0],
        ["k", 3],
        ["k", 10],
        ["k", 1e300],
        ["k", false],
        ["k", true],
        ["ka"],
      ];
      // Written in reverse, so that the order read is the store's, not the writes'.
      for (const key of keys.toReversed()) {
        assert.ok((await kv.commit({ checks: [], mutations: [set(key, key.length)] })).ok);
      }
      assert.deepEqual(await keysOf(kv, { prefix: ["k"] }), keys.slice(1, -1));
      assert.deepEqual(await keysOf(kv, { prefix: ["k", "a"] }), [["k", "a", 1]]);
      assert.deepEqual(await keysOf(kv, { prefix: ["k"] }, 3), keys.slice(1, 4));
      assert.deepEqual(await keysOf(kv, { start: ["k", 0], end: ["k", 10] }), keys.slice(9, 11));
      assert.deepEqual(
        await keysOf(kv, { prefix: ["k"], start: ["k", "b"] }),
        keys.slice(6, -1),
      );
      assert.deepEqual(await keysOf(kv, { prefix: [] }), keys);
    }));

  // Deno KV deletes expired entries some time after `expireIn` (io.ts checks every record's
  // `expiresAt` for that reason); PostgreSQL hides them at once and sweeps them.
  const onPostgres = kind === POSTGRES ? test : () => {};
  onPostgres(
    "expiry: an expired entry is never read, listed, or matched by a check; swept",
    () =>
      withDatabase(kind, async (database) => {
        const kv = backendOf(database);
        const written = await kv.commit({
          checks: [],
          mutations: [set(["e", 1], "short", 1), set(["e", 2], "long", 3_600_000)],
        });
        assert.ok(written.ok);
        await delay(20); // past the 1 ms lifetime on any clock
        const [short, long] = await kv.getMany([["e", 1], ["e", 2]]);
        assert.equal(short.versionstamp, null);
        assert.equal(long.value, "long");
        assert.deepEqual(await keysOf(kv, { prefix: ["e"] }), [["e", 2]]);
        assert.deepEqual(
          await kv.commit({
            checks: [{ key: ["e", 1], versionstamp: written.versionstamp }],
            mutations: [],
          }),
          { ok: false },
        );
        assert.ok(
          (await kv.commit({ checks: [{ key: ["e", 1], versionstamp: null }], mutations: [] })).ok,
          "an expired entry counts as absent",
        );
        assert.equal(await (database as PostgresBackend).sweepExpired(), 1);
      }),
  );

  // Separate instances (a KV file opened 8 times, 8 PostgreSQL pools) race as processes do;
  // SQLite's "database is locked" is retried as io.ts retries it.
  test("8 instances, each writing one absent key at once: one wins", () =>
    withDatabase(kind, async (first, again) => {
      const instances = [backendOf(first)];
      for (let i = 1; i < 8; i++) instances.push(backendOf(await again()));
      for (let round = 0; round < 10; round++) {
        const key = ["race", round];
        const outcomes = await Promise.all(
          Array.from(
            { length: 24 },
            (_, i) =>
              retryLocked(() =>
                instances[i % instances.length].commit({
                  checks: [{ key, versionstamp: null }],
                  mutations: [set(key, i)],
                })
              ),
          ),
        );
        assert.equal(outcomes.filter((outcome) => outcome.ok).length, 1, `round ${round}`);
      }
    }));

  test("instances incrementing one counter by checked writes lose no increment", () =>
    withDatabase(kind, async (first, again) => {
      const instances = [backendOf(first)];
      for (let i = 1; i < 4; i++) instances.push(backendOf(await again()));
      const key = ["counter"];
      const increment = async (kv: KvBackend) => {
        for (;;) {
          const [current] = await retryLocked(() => kv.getMany([key]));
          const next = ((current.value as number | null) ?? 0) + 1;
          const outcome = await retryLocked(() =>
            kv.commit({
              checks: [{ key, versionstamp: current.versionstamp }],
              mutations: [set(key, next)],
            })
          );
          if (outcome.ok) return next;
        }
      };
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => increment(instances[i % instances.length])),
      );
      assert.deepEqual(
        results.toSorted((a, b) => a - b),
        Array.from({ length: 40 }, (_, i) => i + 1),
      );
    }));

  test("one authorization code, 20 parallel exchanges: exactly one 200", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      await withAppOn(kind, async (app) => {
        const code = await issueCode(app);
        const results = await settle(
          await Promise.all(Array.from({ length: PARALLEL }, () => exchange(app, code))),
        );
        const winner = assertOneWinner(results).body as { refresh_token: string };
        assert.equal(await countRecords(app.kv, "code"), 0);
        assert.equal((await refresh(app, winner.refresh_token)).status, 200);
      });
    }
  });

  test("one refresh token, 20 parallel refreshes: exactly one 200", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      await withAppOn(kind, async (app) => {
        const issued = await issueTokens(app);
        const results = await settle(
          await Promise.all(
            Array.from({ length: PARALLEL }, () => refresh(app, issued.refresh_token)),
          ),
        );
        const winner = assertOneWinner(results).body as { refresh_token: string };
        assert.equal((await refresh(app, issued.refresh_token)).status, 400);
        assert.equal((await refresh(app, winner.refresh_token)).status, 200);
      });
    }
  });

  test("20 parallel refreshes of an expiring GitLab token: the lease admits one refresher", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      await withAppOn(kind, async (app) => {
        const issued = await issueTokens(app);
        const before = (await findSessionByRefreshToken(app.store, issued.refresh_token))!;
        app.clock.current = before.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + 60_000;
        app.upstream.refreshes.push(async () => {
          await delay(20);
          return { accessToken: "gl-new", refreshToken: "gl-refresh-new", expiresInSeconds: 7200 };
        });
        const results = await settle(
          await Promise.all(
            Array.from({ length: PARALLEL }, () => refresh(app, issued.refresh_token)),
          ),
        );
        assertOneWinner(results);
        assert.equal(app.upstream.calls.refresh, 1);
        assert.equal(await countRecords(app.kv, "lease"), 0, "the lease was released");
      });
    }
  });

  test("one approved flow, 10 parallel polls: exactly one complete", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      await withAppOn(kind, async (app) => {
        const flowState = await startFlow(app);
        app.upstream.approve();
        app.upstream.user = async () => {
          await delay(20);
          return { id: 4242, username: "ada" };
        };
        const results = await settle(
          await Promise.all(Array.from({ length: 10 }, () => poll(app, flowState))),
        );
        assertOneComplete(results);
        assert.equal(await countRecords(app.kv, "session"), 1);
        assert.equal(await countRecords(app.kv, "code"), 1);
        assert.equal(await countRecords(app.kv, "flow"), 0);
      });
    }
  });

  test("rate-limit counts are shared: two store instances count 40 requests as 1..40", () =>
    withDatabase(kind, async (database, again) => {
      const secrets = createSecretBox([TEST_SECRET]);
      const stores = [createStore(database, systemClock, secrets)];
      stores.push(createStore(await again(), systemClock, secrets));
      const counts = await Promise.all(
        Array.from(
          { length: 40 },
          (_, i) => stores[i % 2].countRequest("token", "192.0.2.1", 1000, 3_600_000),
        ),
      );
      assert.deepEqual(
        counts.toSorted((a, b) => a - b),
        Array.from({ length: 40 }, (_, i) => i + 1),
      );
    }));

  test("rate-limit claims are shared: two store instances never grant past the limit", () =>
    withDatabase(kind, async (database, again) => {
      const secrets = createSecretBox([TEST_SECRET]);
      const stores = [createStore(database, systemClock, secrets)];
      stores.push(createStore(await again(), systemClock, secrets));
      const granted = await Promise.all(
        Array.from(
          { length: 20 },
          (_, i) => stores[i % 2].claimRequests("mcp", "session:s", 3, 50, 3_600_000),
        ),
      );
      assert.equal(granted.reduce((sum, one) => sum + one, 0), 50);
      assert.equal(await stores[0].claimRequests("mcp", "session:s", 3, 50, 3_600_000), 0);
      assert.equal(await stores[1].claimRequests("mcp", "session:t", 3, 50, 3_600_000), 3);
    }));

  test("a counted request is taken back in its window, never below zero, never in the next", () =>
    withDatabase(kind, async (database) => {
      const clock = new FakeClock();
      const store = createStore(database, clock, createSecretBox([TEST_SECRET]));
      const windowMs = 600_000;
      const countedAt = clock.now();
      assert.equal(await store.countRequest("device", "192.0.2.1", 2, windowMs), 1);
      assert.equal(await store.countRequest("device", "192.0.2.1", 2, windowMs), 2);
      assert.equal(await store.countRequest("device", "192.0.2.1", 2, windowMs), 3, "over");
      await store.uncountRequest("device", "192.0.2.1", windowMs, countedAt);
      assert.equal(await store.requestsCounted("device", "192.0.2.1", windowMs), 1);
      await store.uncountRequest("device", "192.0.2.1", windowMs, countedAt);
      await store.uncountRequest("device", "192.0.2.1", windowMs, countedAt);
      assert.equal(await store.requestsCounted("device", "192.0.2.1", windowMs), 0);
      clock.advance(windowMs);
      assert.equal(await store.countRequest("device", "192.0.2.1", 2, windowMs), 1);
      await store.uncountRequest("device", "192.0.2.1", windowMs, countedAt);
      assert.equal(await store.requestsCounted("device", "192.0.2.1", windowMs), 1, "next window");
    }));

  test("operator revocations travel through the store: counted by one process, taken once", () =>
    withDatabase(kind, async (database, again) => {
      const secrets = createSecretBox([TEST_SECRET]);
      const cli = createStore(database, systemClock, secrets);
      const services = [
        createStore(await again(), systemClock, secrets),
        createStore(await again(), systemClock, secrets),
      ];
      assert.equal(await services[0].takeOperatorRevocations(), 0);
      await cli.countOperatorRevocations(2);
      await cli.countOperatorRevocations(3);
      const taken = await Promise.all(services.map((store) => store.takeOperatorRevocations()));
      assert.deepEqual(taken.toSorted((a, b) => a - b), [0, 5], "taken by one process only");
      assert.equal(await services[1].takeOperatorRevocations(), 0);
      await cli.countOperatorRevocations(1);
      assert.equal(await services[1].takeOperatorRevocations(), 1);
    }));
}
