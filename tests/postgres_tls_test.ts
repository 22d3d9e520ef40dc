/**
 * TLS to PostgreSQL per the URL's `sslmode` (and `sslrootcert`), against a throwaway cluster
 * that speaks TLS only (`ssl=on`, pg_hba.conf `hostssl` only) with a certificate made at test
 * time: what connects over TLS, and what stops at start-up in one line.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { connect } from "../src/store/postgres/connect.ts";
import { openDatabase } from "../src/store/open.ts";
import {
  ignorePostgresTests,
  type PostgresCluster,
  sharedPostgres,
  startPostgres,
} from "./_postgres.ts";
import { denoRunArgs, runAdminCli } from "./_service.ts";
import { generateCertificates, type TestCertificates, testCertificates } from "./_tls.ts";
import { TEST_SECRET } from "./_helpers.ts";

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name: `postgres TLS: ${name}`, ignore: ignorePostgresTests, fn });

/** A TLS-only cluster with `certificates`, and a file holding their CA; removed afterwards. */
async function withTlsCluster(
  certificates: TestCertificates,
  fn: (cluster: PostgresCluster, caFile: string) => Promise<void>,
): Promise<void> {
  const { certPem, keyPem, caPem } = certificates;
  const cluster = await startPostgres({ tls: { certPem, keyPem, hostsslOnly: true } });
  const caFile = await Deno.makeTempFile({ suffix: ".pem" });
  try {
    await Deno.writeTextFile(caFile, caPem);
    await fn(cluster, caFile);
  } finally {
    await Deno.remove(caFile);
    await cluster.stop();
  }
}

const withLoopbackCluster = async (fn: (url: string, caFile: string) => Promise<void>) =>
  withTlsCluster(await testCertificates(), async (cluster, caFile) => {
    await fn(await cluster.createDatabase(), caFile);
  });

/** Whether this connection of the pool runs over TLS, as the server sees it. */
async function sessionUsesTls(url: string): Promise<boolean> {
  const sql = connect({ url, poolSize: 1 });
  try {
    const [row] = await sql.unsafe("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()");
    return row.ssl;
  } finally {
    await sql.end();
  }
}

/** Opens the store as the service does at start-up (migrations included), then closes it. */
async function opens(url: string): Promise<void> {
  const opened = await openDatabase({ databaseUrl: url, databasePoolSize: 1 });
  await opened.close();
}

/** The start-up error of the store at `url`: a ConfigError on one line, without the URL. */
async function startUpError(url: string): Promise<string> {
  const error = await openDatabase({ databaseUrl: url, databasePoolSize: 1 }).then(
    (opened) => opened.close().then(() => assert.fail(`${url} opened`)),
    (error) => error,
  );
  assert.ok(error instanceof ConfigError, `a ConfigError, not ${error}`);
  assertOneLine(error.message);
  assert.match(error.message, /^DATABASE_URL: /);
  return error.message;
}

/** `main.ts` started on `url`: exits 1 with one error line (JSON log lines only, no stack). */
async function serviceStartUpError(url: string): Promise<string> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: denoRunArgs(new URL("../main.ts", import.meta.url).pathname, ["start"]),
    env: { DATABASE_URL: url, JWT_SECRET: TEST_SECRET, HOST: "127.0.0.1", PORT: "0" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const printed = new TextDecoder().decode(stdout) + new TextDecoder().decode(stderr);
  assert.equal(code, 1, printed);
  const lines = printed.trim().split("\n").map((line) => JSON.parse(line));
  const errors = lines.filter((line) => line.level === "error");
  assert.equal(errors.length, 1, printed);
  assertOneLine(errors[0].message);
  return errors[0].message;
}

function assertOneLine(message: string): void {
  assert.ok(!message.includes("\n"), `one line: ${message}`);
  assert.doesNotMatch(message, /\bat .*:\d+:\d+/, "no stack trace");
}

test("sslmode=require connects over TLS, the only way the server admits", () =>
  withLoopbackCluster(async (url) => {
    await opens(`${url}?sslmode=require`);
    assert.equal(await sessionUsesTls(`${url}?sslmode=require`), true);
    // Without sslmode: libpq's default, prefer, takes the TLS the server offers.
    assert.equal(await sessionUsesTls(url), true);
  }));

test("sslmode=disable against a TLS-only server stops start-up in one line", () =>
  withLoopbackCluster(async (url) => {
    const message = await startUpError(`${url}?sslmode=disable`);
    assert.match(message, /cannot open the database: .*no encryption/);
    const line = await serviceStartUpError(`${url}?sslmode=disable`);
    assert.match(line, /DATABASE_URL: cannot open the database: .*no encryption/);
  }));

test("sslmode=verify-full: refused for an untrusted CA, connects with sslrootcert or DENO_CERT", () =>
  withLoopbackCluster(async (url, caFile) => {
    const message = await startUpError(`${url}?sslmode=verify-full`);
    assert.match(message, /certificate/);
    const line = await serviceStartUpError(`${url}?sslmode=verify-full`);
    assert.match(line, /DATABASE_URL: cannot open the database: .*certificate/);

    const trusted = `${url}?sslmode=verify-full&sslrootcert=${encodeURIComponent(caFile)}`;
    await opens(trusted);
    assert.equal(await sessionUsesTls(trusted), true);
    const admin = await runAdminCli(["migrate"], { DATABASE_URL: trusted });
    assert.equal(admin.code, 0, admin.stderr);
    // Or without sslrootcert: the CA added to Deno's roots, as for any TLS the process makes.
    const viaDenoCert = await runAdminCli(["migrate"], {
      DATABASE_URL: `${url}?sslmode=verify-full`,
      DENO_CERT: caFile,
    });
    assert.equal(viaDenoCert.code, 0, viaDenoCert.stderr);
  }));

test("sslmode=verify-full checks the URL's host; verify-ca checks only the CA", async () => {
  const elsewhere = await generateCertificates({ ips: [], dns: ["db.example.test"] });
  await withTlsCluster(elsewhere, async (cluster, caFile) => {
    const url = await cluster.createDatabase();
    const rootCert = `sslrootcert=${encodeURIComponent(caFile)}`;
    const message = await startUpError(`${url}?sslmode=verify-full&${rootCert}`);
    assert.match(message, /127\.0\.0\.1/);
    await opens(`${url}?sslmode=verify-ca&${rootCert}`);
    // As libpq: `require` with a root certificate verifies the CA.
    await opens(`${url}?sslmode=require&${rootCert}`);
  });
});

test("an unreadable sslrootcert stops start-up in one line", () =>
  withLoopbackCluster(async (url) => {
    const message = await startUpError(
      `${url}?sslmode=verify-full&sslrootcert=/nonexistent/root.crt`,
    );
    assert.match(message, /sslrootcert \/nonexistent\/root\.crt cannot be read/);
  }));

test("ssl=require, the drivers' spelling, is sslmode=require: a server without TLS is refused", async () => {
  const plain = await (await sharedPostgres()).createDatabase();
  for (const spelling of ["ssl=require", "ssl=true", "ssl=verify-full"]) {
    const config = loadConfig({ DATABASE_URL: `${plain}?${spelling}` });
    await assert.rejects(() => openDatabase(config), Error, spelling);
  }
  const opened = await openDatabase(loadConfig({ DATABASE_URL: `${plain}?ssl=false` }));
  await opened.close();
});

Deno.test("postgres TLS: an unknown sslmode is a configuration error in one line", async () => {
  for (
    const url of [
      "postgres://u:secret@db:5432/auth?ssl=maybe",
      "postgres://u:secret@db:5432/auth?sslmode=disable&ssl=require",
      "postgres://u:secret@db:5432/auth?sslmode=verify_full",
      "postgres://u:secret@db:5432/auth?sslmode=allow",
      "postgres://u:secret@db:5432/auth?sslmode=",
      "postgres://u:secret@db:5432/auth?sslmode=prefer&sslrootcert=/etc/ca.pem",
      "postgres://u:secret@db:5432/auth?sslmode=verify-ca",
    ]
  ) {
    assert.throws(
      () => loadConfig({ DATABASE_URL: url }),
      (error) => {
        assert.ok(error instanceof ConfigError, String(error));
        assert.match(error.message, /^DATABASE_URL: (sslmode|sslrootcert|ssl )/);
        assert.ok(!error.message.includes("secret"), "the password is not echoed");
        assertOneLine(error.message);
        return true;
      },
      url,
    );
  }
  const line = await serviceStartUpError("postgres://u:secret@127.0.0.1:1/auth?sslmode=bogus");
  assert.match(line, /DATABASE_URL: sslmode must be one of disable, prefer, require/);
  assert.ok(!line.includes("secret"));
});
