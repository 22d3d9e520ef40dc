/**
 * Single-use and rotating values on PostgreSQL, raced over two instances of the app, each with
 * its own connection pool, group commit and caches on one database (what two service processes
 * are to the store; tests/multiprocess_test.ts races codes, refresh tokens and GitLab device
 * flows over real processes): a refresh token's grace answer is taken once, a user code is bound
 * to one browser, a device code gets tokens once, an ID token's `jti` is spent once. And a write
 * cut off midway (its connection killed, its statement failing after its first row) leaves
 * nothing behind: the value it would have spent is still there, once.
 */

import assert from "node:assert/strict";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { newSession } from "../src/session/life.ts";
import type { StoreDatabase } from "../src/store/mod.ts";
import { openDatabase } from "../src/store/open.ts";
import { advisoryLockOf } from "../src/store/postgres/backend.ts";
import { connect } from "../src/store/postgres/connect.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  assertNo500,
  assertOneWinner,
  exchange,
  FakeClock,
  FakeUpstream,
  issueCode,
  issueTokens,
  makeTestAppOn,
  refresh,
  TEST_BASE,
  type TestApp,
  token,
} from "./_helpers.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";

const PARALLEL = 20;

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({
    name: `postgres single use: ${name}`,
    ignore: ignorePostgresTests,
    sanitizeResources: false,
    sanitizeOps: false,
    fn,
  });

interface Pair {
  url: string;
  apps: [TestApp<StoreDatabase>, TestApp<StoreDatabase>];
}

/** Two instances of the app (shared clock and GitLab) on a fresh database; closed afterwards. */
async function withTwoInstances(
  env: Record<string, string>,
  fn: (pair: Pair) => Promise<void>,
): Promise<void> {
  const url = await (await sharedPostgres()).createDatabase();
  const opened = [
    await openDatabase({ databaseUrl: url, databasePoolSize: 4 }),
    await openDatabase({ databaseUrl: url, databasePoolSize: 4 }),
  ];
  const clock = new FakeClock(Date.now());
  const upstream = new FakeUpstream();
  const apps: TestApp<StoreDatabase>[] = [];
  try {
    for (const { database } of opened) {
      apps.push(await makeTestAppOn(database, { env, clock, upstream }));
    }
    await fn({ url, apps: apps as Pair["apps"] });
  } finally {
    for (const app of apps) app.close();
    for (const database of opened) await database.close();
  }
}

/** `PARALLEL` requests at once, request i to instance i mod 2; status and parsed body of each. */
async function race(
  apps: Pair["apps"],
  request: (app: TestApp<StoreDatabase>) => Promise<Response>,
) {
  return await Promise.all(
    Array.from({ length: PARALLEL }, async (_, i) => {
      const response = await request(apps[i % 2]);
      const text = await response.text();
      let body;
      try {
        body = JSON.parse(text);
      } catch {
        body = { html: text };
      }
      return { status: response.status, body };
    }),
  );
}

test("a rotated refresh token's grace answer is taken once across instances", () =>
  withTwoInstances({ REFRESH_GRACE_SECONDS: "60" }, async ({ apps: [one, two] }) => {
    for (let round = 1; round <= 3; round++) {
      const { refresh_token: previous } = await issueTokens(one);
      const rotated = await refresh(two, previous);
      assert.equal(rotated.status, 200);
      const current = (await rotated.json()).refresh_token;
      const winner = assertOneWinner(await race([one, two], (app) => refresh(app, previous)));
      assert.equal(winner.body.refresh_token, current, `round ${round}: the same answer again`);
      const next = await refresh(one, current);
      assert.equal(next.status, 200, `round ${round}: the session goes on`);
      await next.body?.cancel();
    }
  }));

async function deviceClient(app: TestApp<StoreDatabase>): Promise<string> {
  const response = await app.app(
    new Request(`${TEST_BASE}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_name: "build box", grant_types: [DEVICE_CODE_GRANT_TYPE] }),
    }),
  );
  assert.equal(response.status, 201);
  return (await response.json()).client_id;
}

async function startDevice(app: TestApp<StoreDatabase>, clientId: string) {
  const response = await app.app(
    new Request(`${TEST_BASE}/device_authorization`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ client_id: clientId }),
    }),
  );
  assert.equal(response.status, 200);
  return await response.json() as { device_code: string; user_code: string };
}

/** What the /device sign-in commits once the user approved (as device_authorization_test). */
async function approve(app: TestApp<StoreDatabase>, deviceCode: string): Promise<void> {
  const device = await app.store.getDeviceAuthorization(deviceCode);
  assert.ok(device);
  const sealedTokens = await app.store.sealUpstreamTokens({
    accessToken: "gitlab-access",
    refreshToken: "gitlab-refresh",
  });
  const session = newSession(
    device.value.clientId,
    { sealedTokens, expiresAt: 0, user: { id: "42", username: "octocat" } },
    app.clock.now(),
    600,
    device.value.resource,
  );
  assert.ok(await app.store.approveDeviceAuthorization(device, session));
}

test("a user code is bound to one browser, a device code gets tokens once, across instances", () =>
  withTwoInstances({}, async ({ apps }) => {
    const [one, two] = apps;
    const clientId = await deviceClient(one);
    for (let round = 1; round <= 3; round++) {
      const { device_code, user_code } = await startDevice(two, clientId);
      const opened = await race(
        apps,
        (app) => app.app(new Request(`${TEST_BASE}/device?user_code=${user_code}`)),
      );
      const statuses = opened.map((answer) => answer.status).sort();
      assert.deepEqual(
        statuses,
        [200, ...Array(PARALLEL - 1).fill(409)],
        `round ${round}: one browser holds the user code`,
      );

      await approve(one, device_code);
      one.clock.advance(10_000);
      const polls = await race(apps, (app) =>
        token(app, {
          grant_type: DEVICE_CODE_GRANT_TYPE,
          device_code,
          client_id: clientId,
        }));
      assertNo500(polls);
      const winners = polls.filter((answer) => answer.status === 200);
      assert.equal(winners.length, 1, `round ${round}: ${JSON.stringify(polls)}`);
      for (const loser of polls.filter((answer) => answer.status !== 200)) {
        assert.ok(["invalid_grant", "slow_down"].includes(loser.body.error), loser.body.error);
      }
      const again = await token(two, {
        grant_type: DEVICE_CODE_GRANT_TYPE,
        device_code,
        client_id: clientId,
      });
      assert.equal(again.status, 400, "spent");
      await again.body?.cancel();
    }
  }));

test("a CI job's ID token (its jti) is accepted once across instances", async () => {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(
    `${dir}/access.yaml`,
    "ci:\n  - project: acme/*\n    ref: main\n    ref_protected: true\n    servers: [default]\n",
  );
  const env = {
    MACHINE_ACCESS_FILE: `${dir}/access.yaml`,
    MCP_UPSTREAM_URL: "http://127.0.0.1:1/mcp",
  };
  try {
    await withTwoInstances(env, async ({ apps }) => {
      for (let round = 1; round <= 3; round++) {
        const assertion = await apps[0].upstream.idTokens.sign(TEST_BASE, apps[0].clock.now());
        const answers = await race(apps, (app) =>
          token(app, {
            grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer",
            assertion,
          }));
        assertOneWinner(answers);
      }
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

test("a rotation whose connection is killed while it waits answers 503 and spends nothing", () =>
  withTwoInstances({}, async ({ url, apps: [one, two] }) => {
    const admin = connect({ url, poolSize: 1 });
    const holder = connect({ url, poolSize: 1 });
    try {
      const { refresh_token } = await issueTokens(one);
      const [session] = await recordsOf(one.kv, "session");
      const lock = String(advisoryLockOf(session.key));
      await holder.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${lock}::bigint)`;
        const answer = refresh(two, refresh_token);
        // The rotation's kv_commit waits for the lock held here; its connection is then cut.
        for (let killed = 0; killed === 0;) {
          await new Promise((resolve) => setTimeout(resolve, 20));
          [{ killed }] = await admin`
            SELECT count(pg_terminate_backend(pid))::int AS killed FROM pg_stat_activity
            WHERE query LIKE '%kv_commit(%' AND wait_event_type = 'Lock'`;
        }
        const cut = await answer;
        const body = await cut.json();
        assert.equal(cut.status, 503, JSON.stringify(body));
        assert.equal(body.error, "temporarily_unavailable");
        assert.equal(cut.headers.get("Retry-After"), "5");
      });
      const [after] = await recordsOf(one.kv, "session");
      assert.equal(after.versionstamp, session.versionstamp, "the session is as it was");
      assertOneWinner(await race([one, two], (app) => refresh(app, refresh_token)));
    } finally {
      await admin.end();
      await holder.end();
    }
  }));

test("an exchange whose write fails after deleting the code answers 503 and spends nothing", () =>
  withTwoInstances({}, async ({ url, apps: [one, two] }) => {
    const admin = connect({ url, poolSize: 1 });
    try {
      const code = await issueCode(one);
      // The one kv_commit of the exchange deletes the code, then writes the session: its
      // session row fails as a statement cancelled there would.
      await admin.unsafe(`
        CREATE FUNCTION fail_session_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
          IF position(decode('0273657373696f6e00', 'hex') IN NEW.key) = 1 THEN
            RAISE EXCEPTION 'cancelled midway' USING ERRCODE = '57014';
          END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER fail_session_write BEFORE INSERT OR UPDATE ON kv
          FOR EACH ROW EXECUTE FUNCTION fail_session_write();
      `);
      const failed = await exchange(two, code);
      const body = await failed.json();
      assert.equal(failed.status, 503, JSON.stringify(body));
      assert.equal(body.error, "temporarily_unavailable");
      await admin.unsafe("DROP TRIGGER fail_session_write ON kv");
      assertOneWinner(await race([one, two], (app) => exchange(app, code)));
    } finally {
      await admin.end();
    }
  }));
