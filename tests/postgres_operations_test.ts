/**
 * Running on PostgreSQL: what operators meet besides the store's contract
 * (store_contract_test.ts). No token, code or secret in clear in a `pg_dump` (nor in the log);
 * an outage answered with 503
 * (readiness within 2 s, requests with Retry-After) and recovered from without a restart, as
 * is a database that cannot write for now (read-only, lock_timeout, full, retry asked);
 * migrations applied once by processes starting together, a newer schema refused in one line,
 * `admin migrate`; DATABASE_URL with KV_PATH refused.
 */

import assert from "node:assert/strict";
import { runAdmin } from "../src/admin/cli.ts";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { connect } from "../src/store/postgres/connect.ts";
import { openDatabase } from "../src/store/open.ts";
import { advisoryLockOf } from "../src/store/postgres/backend.ts";
import { decodeKey } from "../src/store/postgres/key_codec.ts";
import {
  exchange,
  issueCode,
  makeTestAppOn,
  refresh,
  register,
  startFlow,
  TEST_BASE,
  TEST_SECRET,
  token,
} from "./_helpers.ts";
import { addClient, basic, writeAccessFile } from "./_machine_clients.ts";
import { spawnService } from "./_service.ts";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { DEVICE_CODE_GRANT_TYPE as DEVICE_GRANT } from "../src/http/grant_types.ts";
import { newSession } from "../src/session/life.ts";
import { createLogger } from "../src/logger.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name: `postgres: ${name}`, ignore: ignorePostgresTests, fn });

/** The app over a fresh database of the shared cluster; closed afterwards. */
async function withPostgresApp(
  fn: (app: Awaited<ReturnType<typeof makeTestAppOn>>, url: string) => Promise<void>,
) {
  const url = await (await sharedPostgres()).createDatabase();
  const opened = await openDatabase({ databaseUrl: url, databasePoolSize: 4 });
  try {
    await fn(await makeTestAppOn(opened.database), url);
  } finally {
    await opened.close();
  }
}

function encodings(secret: string): string[] {
  const bytes = new TextEncoder().encode(secret);
  return [
    secret,
    bytes.toBase64(),
    bytes.toBase64({ alphabet: "base64url", omitPadding: true }),
    bytes.toHex(),
  ];
}

test("a pg_dump after a whole sign-in and a refresh holds no token in clear", () =>
  withPostgresApp(async (app, url) => {
    const code = await issueCode(app);
    const issued = await (await exchange(app, code)).json();
    const refreshed = await (await refresh(app, issued.refresh_token)).json();
    assert.ok(refreshed.refresh_token);
    const secrets = {
      "JWT secret": TEST_SECRET,
      "authorization code": code,
      "access token signature": issued.access_token.split(".")[2],
      "refresh token": issued.refresh_token,
      "new refresh token": refreshed.refresh_token,
      "GitLab access token": "gl-access-0",
      "GitLab refresh token": "gl-refresh-0",
    };
    const dump = await (await sharedPostgres()).dump(url);
    assert.match(dump, /COPY public\.kv/, "the dump holds the store's table");
    for (const [name, secret] of Object.entries(secrets)) {
      for (const form of encodings(secret)) {
        assert.ok(!dump.includes(form), `${name} is in the dump in clear`);
      }
    }
  }));

test("a pg_dump (and the log) after a device grant, a machine client and a pending GitLab flow holds no secret in clear", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const opened = await openDatabase({ databaseUrl: url, databasePoolSize: 4 });
  const env = {
    MACHINE_ACCESS_FILE: await writeAccessFile([{ client_id: "vault", servers: ["default"] }]),
  };
  const lines: string[] = [];
  const logger = createLogger((line) => void lines.push(line));
  const app = await makeTestAppOn(opened.database, { env, logger });
  try {
    const post = (path: string, body: Record<string, string>) =>
      app.app(
        new Request(`${TEST_BASE}${path}`, {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams(body),
        }),
      );
    // Our device authorization grant (RFC 8628), through the user's approval and the poll.
    const registered = await register(app, { client_name: "box", grant_types: [DEVICE_GRANT] });
    const { client_id } = await registered.json();
    const started = await (await post("/device_authorization", { client_id })).json();
    const page = await app.app(new Request(`${TEST_BASE}/device?user_code=${started.user_code}`));
    assert.equal(page.status, 200);
    await page.body?.cancel();
    const device = await app.store.getDeviceAuthorization(started.device_code);
    assert.ok(device);
    const sealedTokens = await app.store.sealUpstreamTokens({
      accessToken: "gl-device-access-7f3a",
      refreshToken: "gl-device-refresh-9c1e",
    });
    const user = { sealedTokens, expiresAt: 0, user: { id: "42", username: "octocat" } };
    const session = newSession(client_id, user, app.clock.now(), 600, device.value.resource);
    assert.ok(await app.store.approveDeviceAuthorization(device, session));
    app.clock.advance(10_000);
    const granted = await (await token(app, {
      grant_type: DEVICE_GRANT,
      device_code: started.device_code,
      client_id,
    })).json();
    assert.ok(granted.refresh_token, JSON.stringify(granted));
    // A machine client with a secret, and its token.
    const { client_secret = "" } = await addClient(app.store, { id: "vault", secret: true });
    const machine = await token(app, { grant_type: "client_credentials" }, {
      headers: basic("vault", client_secret),
    });
    assert.equal(machine.status, 200);
    const machineToken = (await machine.json()).access_token;
    // A sign-in waiting at GitLab: its flow holds GitLab's device code.
    app.upstream.device = { ...app.upstream.device, deviceCode: "gl-device-code-5be2d1" };
    const flowState = await startFlow(app);

    const secrets = {
      "device code": started.device_code,
      "user code": started.user_code,
      "user code without its dash": started.user_code.replace("-", ""),
      "device grant's refresh token": granted.refresh_token,
      "device grant's access token signature": granted.access_token.split(".")[2],
      "GitLab access token": "gl-device-access-7f3a",
      "GitLab refresh token": "gl-device-refresh-9c1e",
      "machine client's secret": client_secret,
      "machine token's signature": machineToken.split(".")[2],
      "flow state": flowState,
      "GitLab device code": "gl-device-code-5be2d1",
    };
    const dump = await (await sharedPostgres()).dump(url);
    assert.match(dump, /COPY public\.kv/);
    assert.ok(lines.length > 0, "the requests were logged");
    const log = lines.join("\n");
    for (const [name, secret] of Object.entries(secrets)) {
      for (const form of encodings(secret)) {
        assert.ok(!dump.includes(form), `${name} is in the dump in clear`);
        assert.ok(!log.includes(form), `${name} is in the log`);
      }
    }
  } finally {
    app.close();
    await opened.close();
  }
});

test("an outage: /readyz 503 within 2 s, requests 503 with Retry-After, then recovery", () =>
  withPostgresApp(async (app) => {
    const cluster = await sharedPostgres();
    const issued = await (await exchange(app, await issueCode(app))).json();
    await cluster.pause();
    try {
      const started = performance.now();
      const ready = await app.app(new Request(`${TEST_BASE}/readyz`));
      assert.ok(performance.now() - started < 2000, "readiness answered within 2 s");
      assert.equal(ready.status, 503);
      assert.deepEqual((await ready.json()).checks.kv, "unreachable");

      const refused = await refresh(app, issued.refresh_token);
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get("Retry-After"), "5");
      assert.equal((await refused.json()).error, "temporarily_unavailable");
    } finally {
      await cluster.start();
    }
    const ready = await app.app(new Request(`${TEST_BASE}/readyz`));
    assert.equal(ready.status, 200, "recovered without a restart");
    await ready.body?.cancel();
    const again = await refresh(app, issued.refresh_token);
    assert.equal(again.status, 200, "the refresh token refused during the outage still works");
    await again.body?.cancel();
  }));

test("four processes starting together apply each migration once", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const opened = await Promise.all(
    Array.from({ length: 4 }, () => openDatabase({ databaseUrl: url, databasePoolSize: 1 })),
  );
  await Promise.all(opened.map((database) => database.close()));
  const sql = connect({ url, poolSize: 1 });
  try {
    const rows = await sql.unsafe("SELECT version, name FROM schema_migrations ORDER BY version");
    assert.deepEqual(rows.map((row) => [row.version, row.name]), [[1, "kv"]]);
    // A newer release migrated this database: this code refuses to start, in one line.
    await sql.unsafe("INSERT INTO schema_migrations (version, name) VALUES (999, 'future')");
  } finally {
    await sql.end();
  }
  const refused = await openDatabase({ databaseUrl: url, databasePoolSize: 1 }).then(
    () => assert.fail("a newer schema was accepted"),
    (error) => error,
  );
  assert.ok(refused instanceof ConfigError);
  assert.match(refused.message, /^DATABASE_URL: .*version 999, newer than this code's 1/);
  assert.ok(!refused.message.includes("\n"));
});

test("two service processes started together on an empty database both serve, migrated once", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const gitlab = startSimulatedGitLab();
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "pg-app",
    JWT_SECRET: TEST_SECRET,
    DATABASE_URL: url,
  };
  const started = await Promise.allSettled([spawnService(env), spawnService(env)]);
  const services = started.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  try {
    assert.deepEqual(
      started.map((s) => s.status),
      ["fulfilled", "fulfilled"],
      String(
        started.map((s) => s.status === "rejected" ? s.reason : ""),
      ),
    );
    for (const service of services) {
      const ready = await fetch(`${service.url}/readyz`);
      assert.equal(ready.status, 200, await ready.text());
    }
  } finally {
    await Promise.all(services.map((service) => service.stop()));
    await gitlab.close();
  }
  const sql = connect({ url, poolSize: 1 });
  try {
    const rows = await sql.unsafe("SELECT version FROM schema_migrations");
    assert.deepEqual(rows.map((row) => row.version), [1]);
  } finally {
    await sql.end();
  }
});

test("search_path in DATABASE_URL: the store's schema; one naming no schema stops start-up in one line", async () => {
  const cluster = await sharedPostgres();
  const url = await cluster.createDatabase();
  const name = new URL(url).pathname.slice(1);
  const refused = await openDatabase({
    databaseUrl: `${url}?search_path=nowhere`,
    databasePoolSize: 1,
  })
    .then(() => assert.fail("opened"), (error) => error);
  assert.ok(refused instanceof ConfigError);
  assert.match(
    refused.message,
    /^DATABASE_URL: cannot open the database: no schema has been selected/,
  );
  await cluster.psql("CREATE SCHEMA auth", name);
  const opened = await openDatabase({
    databaseUrl: `${url}?search_path=auth`,
    databasePoolSize: 2,
  });
  try {
    const app = await makeTestAppOn(opened.database);
    const issued = await (await exchange(app, await issueCode(app))).json();
    assert.equal((await refresh(app, issued.refresh_token)).status, 200);
    app.close();
  } finally {
    await opened.close();
  }
  const tables = await cluster.psql(
    "SELECT schemaname || '.' || tablename FROM pg_tables WHERE tablename IN ('kv', 'schema_migrations') ORDER BY 1",
    name,
  );
  assert.deepEqual(tables.trim().split("\n"), ["auth.kv", "auth.schema_migrations"]);
});

test("admin migrate applies the migrations without starting the service", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const lines: string[] = [];
  const output = {
    out: (line: string) => lines.push(line),
    err: (line: string) => lines.push(line),
  };
  assert.equal(await runAdmin(["migrate"], { DATABASE_URL: url }, output), 0);
  assert.equal(await runAdmin(["migrate"], { DATABASE_URL: url }, output), 0);
  assert.deepEqual(lines, [
    "applied migrations 1; schema at version 1",
    "schema up to date at version 1",
  ]);
});

test("admin migrate waits for another migration no longer than DATABASE_TIMEOUT_MS", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const lines: string[] = [];
  const output = {
    out: (line: string) => lines.push(line),
    err: (line: string) => lines.push(line),
  };
  const holder = connect({ url, poolSize: 1 });
  try {
    // Another process migrating holds the migration lock (migrate.ts's MIGRATION_LOCK).
    await holder.begin(async (tx) => {
      await tx.unsafe("SELECT pg_advisory_xact_lock($1)", [String(0x676d6370617574n)]);
      const started = performance.now();
      const env = { DATABASE_URL: url, DATABASE_TIMEOUT_MS: "300" };
      assert.equal(await runAdmin(["migrate"], env, output), 1);
      const ms = performance.now() - started;
      assert.ok(ms < 2_000, `gave up after ${Math.round(ms)} ms, not DATABASE_TIMEOUT_MS's 300`);
    });
  } finally {
    await holder.end();
  }
  assert.match(lines.join("\n"), /^admin: migrate failed: .*statement timeout/);
});

test("admin commands refuse a database without the store, and leave it untouched", async () => {
  const url = await (await sharedPostgres()).createDatabase();
  const lines: string[] = [];
  const output = {
    out: (line: string) => lines.push(line),
    err: (line: string) => lines.push(line),
  };
  const env = { DATABASE_URL: url, JWT_SECRET: TEST_SECRET };
  const revoke = ["sessions", "revoke", "--user", "alice", "--keep-gitlab-tokens"];
  // A mistyped database: "no session of alice" there would tell the operator alice is out.
  assert.equal(await runAdmin(revoke, env, output), 1);
  assert.match(lines.join("\n"), /holds no store of the service/);
  const sql = connect({ url, poolSize: 1 });
  const [{ tables }] =
    await sql`SELECT count(*)::int AS tables FROM pg_tables WHERE schemaname = 'public'`;
  await sql.end();
  assert.equal(tables, 0, "nothing created in it");
  // Once it is the service's (migrated), the same command runs.
  assert.equal(await runAdmin(["migrate"], { DATABASE_URL: url }, output), 0);
  assert.equal(await runAdmin(revoke, env, output), 3, "no session of that user");
});

Deno.test("postgres: DATABASE_URL and KV_PATH together are refused in one line", () => {
  assert.throws(
    () => loadConfig({ DATABASE_URL: "postgres://u:p@db:5432/auth", KV_PATH: "/tmp/kv.sqlite" }),
    (error) =>
      error instanceof ConfigError &&
      /^DATABASE_URL: cannot be set together with KV_PATH/.test(error.message) &&
      !error.message.includes("u:p"),
  );
  assert.throws(
    () => loadConfig({ DATABASE_URL: "mysql://secret-password@db/auth" }),
    (error) => error instanceof ConfigError && !error.message.includes("secret-password"),
  );
});

test("a database that cannot write for now answers 503 with Retry-After, never 500, and is served again", () =>
  withPostgresApp(async (app, url) => {
    const cluster = await sharedPostgres();
    const name = new URL(url).pathname.slice(1);
    const sql = connect({ url, poolSize: 1 });
    /** A refresh while the database is in `state`: 503 temporarily_unavailable, Retry-After. */
    const assertUnavailable = async (state: string, refreshToken: string) => {
      const answer = await refresh(app, refreshToken);
      const text = await answer.text();
      assert.equal(answer.status, 503, `${state}: ${text}`);
      assert.equal(answer.headers.get("Retry-After"), "5", state);
      assert.equal(JSON.parse(text).error, "temporarily_unavailable", state);
    };
    /** New connections take the database's new settings: the app's are cut, and replaced. */
    const reconnect = async () => {
      await sql.unsafe(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        [name],
      );
      // The readiness probes use the pool, which replaces the ended connections.
      for (let i = 0; i < 8; i++) {
        await (await app.app(new Request(`${TEST_BASE}/readyz`))).body?.cancel();
      }
    };
    try {
      let tokens = await (await exchange(app, await issueCode(app))).json();
      // A failover that lands on a standby: every write is refused as read-only (25006).
      await cluster.psql(`ALTER DATABASE ${name} SET default_transaction_read_only = on`);
      await reconnect();
      await assertUnavailable("read-only", tokens.refresh_token);
      await cluster.psql(`ALTER DATABASE ${name} RESET default_transaction_read_only`);
      // A role's lock_timeout shorter than a lock wait (55P03): the session's lock is held.
      await cluster.psql(`ALTER DATABASE ${name} SET lock_timeout = '50ms'`);
      await reconnect();
      const [session] = await sql.unsafe(
        "SELECT key FROM kv WHERE key >= '\\x0273657373696f6e00'::bytea ORDER BY key LIMIT 1",
      );
      assert.ok(session);
      await sql.begin(async (tx) => {
        await tx.unsafe("SELECT pg_advisory_xact_lock($1)", [
          String(advisoryLockOf(decodeKey(session.key))),
        ]);
        await assertUnavailable("lock_timeout", tokens.refresh_token);
      });
      await cluster.psql(`ALTER DATABASE ${name} RESET lock_timeout`);
      // What PostgreSQL says of writes it cannot do now: out of disk or memory, a transaction
      // to retry, a commit whose outcome it does not know.
      for (const code of ["53100", "53200", "40001", "40003"]) {
        await cluster.psql(
          `CREATE OR REPLACE FUNCTION refuse_write() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN RAISE EXCEPTION 'cannot write now' USING ERRCODE = '${code}'; END $$;
          CREATE OR REPLACE TRIGGER refuse_write BEFORE INSERT OR UPDATE ON kv
            FOR EACH ROW EXECUTE FUNCTION refuse_write();`,
          name,
        );
        await assertUnavailable(code, tokens.refresh_token);
      }
      await cluster.psql("DROP TRIGGER refuse_write ON kv", name);
      await reconnect();
      const served = await refresh(app, tokens.refresh_token);
      assert.equal(served.status, 200, "the refresh token refused meanwhile still works");
      tokens = await served.json();
      assert.ok(tokens.refresh_token);
    } finally {
      await sql.end();
    }
  }));

Deno.test("postgres: DATABASE_URL cannot replace the store's statement_timeout or isolation", () => {
  // The driver would send them to the server after the store's own (statement_timeout=0: a
  // statement never given up; repeatable read: checked writes comparing an old snapshot).
  for (
    const query of [
      "statement_timeout=0",
      "default_transaction_isolation=repeatable%20read",
      "sslmode=disable&Statement_Timeout=0",
    ]
  ) {
    assert.throws(
      () => loadConfig({ DATABASE_URL: `postgres://u:p@db:5432/auth?${query}` }),
      (error) =>
        error instanceof ConfigError &&
        /^DATABASE_URL: \w+ cannot be set in the URL: the service sets it/.test(error.message) &&
        !error.message.includes("u:p") && !error.message.includes("\n"),
      query,
    );
  }
  const config = loadConfig({
    DATABASE_URL: "postgres://u:p@db:5432/auth?search_path=auth&application_name=a",
    JWT_SECRET: TEST_SECRET,
  });
  assert.ok(config.databaseUrl);
});
