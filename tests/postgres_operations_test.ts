/**
 * Running on PostgreSQL: what operators meet besides the store's contract
 * (store_contract_test.ts). No token in clear in a `pg_dump`; an outage answered with 503
 * (readiness within 2 s, requests with Retry-After) and recovered from without a restart;
 * migrations applied once by processes starting together, a newer schema refused in one line,
 * `admin migrate`; DATABASE_URL with KV_PATH refused.
 */

import assert from "node:assert/strict";
import { runAdmin } from "../src/admin/cli.ts";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { connect } from "../src/store/postgres/connect.ts";
import { openDatabase } from "../src/store/open.ts";
import { exchange, issueCode, makeTestAppOn, refresh, TEST_BASE, TEST_SECRET } from "./_helpers.ts";
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
