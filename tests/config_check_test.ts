/**
 * `admin config check` (issue 38 §5), run as an operator runs it: every problem start-up would
 * stop at, one line each and all at once (a missing required secret included); the effective
 * configuration as `NAME=value` with every secret as `****`; nothing connected to unless
 * `--connect`, which opens the store as the service would.
 */

import assert from "node:assert/strict";
import { TEST_SECRET } from "./_helpers.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";
import { runAdminCli } from "./_service.ts";

const FILE_SECRET = "metrics-token-in-a-file-that-is-32-bytes-or-more";
const PASSWORD = "pg-password-never-shown";

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "config-check-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function linesOf(text: string): string[] {
  return text.split("\n").filter((line) => line !== "");
}

/** The problem lines of stderr: without the warnings (gitlab.com without a list is one). */
function problemsOf(stderr: string): string[] {
  return linesOf(stderr).filter((line) => !line.startsWith("admin: warning: "));
}

Deno.test("config check reports every problem at once, one line each, and exits 1", () =>
  withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/empty`, "\n");
    await Deno.writeTextFile(`${dir}/metrics`, `${FILE_SECRET}\n`);
    const run = await runAdminCli(["config", "check"], {
      GITLAB_CLIENT_ID: "app",
      JWT_SECRET_FILE: `${dir}/empty`,
      METRICS_TOKEN: FILE_SECRET,
      METRICS_TOKEN_FILE: `${dir}/metrics`,
      ENCRYPTION_KEY_FILE: `${dir}/missing`,
      ACCESS_TOKEN_ALG: "RS1",
      SECURITY_PROFILE: "lax",
      // A rule between two variables, checked though others are wrong.
      KV_PATH: "/tmp/kv.sqlite3",
      DATABASE_URL: `postgres://auth:${PASSWORD}@127.0.0.1:1/auth`,
    });
    assert.equal(run.code, 1, run.stderr);
    const problems = problemsOf(run.stderr);
    assert.equal(problems.length, 6, run.stderr);
    assert.ok(problems.some((line) => /SECURITY_PROFILE: /.test(line)));
    assert.ok(
      problems.some((line) => /DATABASE_URL: cannot be set together with KV_PATH/.test(line)),
    );
    assert.ok(!run.stderr.includes(PASSWORD));
    assert.match(problems[0], /JWT_SECRET_FILE: .*empty is empty/);
    assert.ok(problems.some((line) => /METRICS_TOKEN_FILE: is set and so is/.test(line)));
    assert.ok(problems.some((line) => /ENCRYPTION_KEY_FILE: cannot read/.test(line)));
    assert.ok(problems.some((line) => /ACCESS_TOKEN_ALG: must be one of/.test(line)));
    assert.ok(!(run.stdout + run.stderr).includes(FILE_SECRET), "no secret echoed");
    assert.ok(!(run.stdout + run.stderr).includes("    at "), "no stack trace");
  }));

Deno.test("config check: a missing required secret and a rule between variables are problems", async () => {
  const missing = await runAdminCli(["config", "check"], { GITLAB_CLIENT_ID: "app" });
  assert.equal(missing.code, 1);
  assert.deepEqual(problemsOf(missing.stderr), ["admin: JWT_SECRET: is required"]);
  const both = await runAdminCli(["config", "check"], {
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: "/tmp/kv.sqlite3",
    DATABASE_URL: `postgres://auth:${PASSWORD}@127.0.0.1:1/auth`,
  });
  assert.equal(both.code, 1);
  assert.equal(problemsOf(both.stderr).length, 1, both.stderr);
  assert.match(
    problemsOf(both.stderr)[0],
    /^admin: DATABASE_URL: cannot be set together with KV_PATH/,
  );
  assert.ok(!(both.stdout + both.stderr).includes(PASSWORD));
});

Deno.test("config check says the weak settings start-up would warn about, and exits 0", async () => {
  const run = await runAdminCli(["config", "check"], {
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: "a".repeat(40),
    RATE_LIMIT_EXEMPT: "0.0.0.0/0",
  });
  assert.equal(run.code, 0, run.stderr);
  const warnings = linesOf(run.stderr);
  assert.equal(warnings.length, 3, run.stderr);
  assert.match(
    warnings[0],
    /^admin: warning: anyone with a gitlab\.com account can sign in .*ALLOWED_GITLAB_GROUPS/,
  );
  assert.match(warnings[1], /^admin: warning: JWT_SECRET has fewer than 8 distinct characters/);
  assert.match(warnings[2], /^admin: warning: RATE_LIMIT_EXEMPT exempts 0\.0\.0\.0\/0/);
  assert.ok(!run.stderr.includes("a".repeat(40)), "no secret echoed");
});

Deno.test("config check says what start-up warns about who can sign in, and a list silences it", async () => {
  const configured = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET };
  const strict = await runAdminCli(["config", "check"], {
    ...configured,
    SECURITY_PROFILE: "strict",
    GITLAB_URL: "https://gitlab.example",
    BASE_URL: "https://auth.example",
  });
  assert.equal(strict.code, 0, strict.stderr);
  assert.deepEqual(linesOf(strict.stderr).map((line) => line.slice(0, 80)), [
    "admin: warning: SECURITY_PROFILE=strict, yet every account of https://gitlab.exa",
  ]);
  const listed = await runAdminCli(["config", "check"], {
    ...configured,
    ALLOWED_GITLAB_USERS: "id:1",
  });
  assert.equal(listed.code, 0, listed.stderr);
  assert.equal(listed.stderr, "");
});

Deno.test("config check prints the effective configuration with every secret as ****", () =>
  withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/metrics`, `${FILE_SECRET}\n`);
    const run = await runAdminCli(["config", "check"], {
      GITLAB_CLIENT_ID: "app",
      GITLAB_CLIENT_SECRET: "gitlab-application-secret",
      JWT_SECRET: TEST_SECRET,
      ALLOWED_GITLAB_GROUPS: "acme",
      METRICS_TOKEN_FILE: `${dir}/metrics`,
      // Unreachable: without --connect nothing is connected to.
      DATABASE_URL: `postgres://auth:${PASSWORD}@127.0.0.1:1/auth`,
    });
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stderr, "");
    const lines = linesOf(run.stdout);
    for (const name of ["JWT_SECRET", "GITLAB_CLIENT_SECRET", "METRICS_TOKEN", "DATABASE_URL"]) {
      assert.ok(lines.includes(`${name}=****`), name);
    }
    assert.ok(lines.includes("JWT_SECRET_PREVIOUS="), "an unset secret is shown empty");
    assert.ok(lines.includes("GITLAB_CLIENT_ID=app"));
    assert.ok(lines.includes(`METRICS_TOKEN_FILE=${dir}/metrics`));
    assert.ok(lines.includes("ACCESS_TOKEN_ALG=HS256"), "a default is shown");
    assert.ok(lines.every((line) => /^[A-Z0-9_]+=/.test(line)), "NAME=value lines only");
    for (const secret of [TEST_SECRET, FILE_SECRET, PASSWORD, "gitlab-application-secret"]) {
      assert.ok(!run.stdout.includes(secret), secret);
    }
  }));

Deno.test("config check shows SIGNING_KEYS, private keys, as ****", async () => {
  const generated = await runAdminCli(["keys", "generate", "--alg", "ES256"], {});
  assert.equal(generated.code, 0, generated.stderr);
  const key = generated.stdout.trim();
  const run = await runAdminCli(["config", "check"], {
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    ACCESS_TOKEN_ALG: "ES256",
    SIGNING_KEYS: `[${key}]`,
  });
  assert.equal(run.code, 0, run.stderr);
  assert.ok(linesOf(run.stdout).includes("SIGNING_KEYS=****"), run.stdout);
  assert.ok(!run.stdout.includes(JSON.parse(key).d), "the private key is never shown");
});

Deno.test("config check --connect opens the store: a KV file that does not exist is a problem", () =>
  withDir(async (dir) => {
    const env = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET, KV_PATH: `${dir}/kv.sqlite3` };
    const offline = await runAdminCli(["config", "check"], env);
    assert.equal(offline.code, 0, offline.stderr);
    const connected = await runAdminCli(["config", "check", "--connect"], env);
    assert.equal(connected.code, 1);
    assert.equal(problemsOf(connected.stderr).length, 1, connected.stderr);
    assert.match(connected.stderr, /kv\.sqlite3/);
  }));

Deno.test({
  name: "config check --connect on PostgreSQL: the service's database passes, a bare one does not",
  ignore: ignorePostgresTests,
  fn: () =>
    withDir(async (dir) => {
      const postgres = await sharedPostgres();
      const url = await postgres.createDatabase();
      await Deno.writeTextFile(`${dir}/database`, `${url}\n`);
      const env = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET };
      const files = { ...env, DATABASE_URL_FILE: `${dir}/database` };
      const bare = await runAdminCli(["config", "check", "--connect"], files);
      assert.equal(bare.code, 1);
      assert.match(bare.stderr, /holds no store of the service/);
      assert.equal(problemsOf(bare.stderr).length, 1, bare.stderr);
      assert.equal((await runAdminCli(["migrate"], files)).code, 0);
      const migrated = await runAdminCli(["config", "check", "--connect"], files);
      assert.equal(migrated.code, 0, migrated.stderr);
      assert.ok(migrated.stdout.includes("DATABASE_URL=****"));
      assert.ok(!migrated.stdout.includes(url));
    }),
});

Deno.test("config check never shows a password written into a URL, in its lines or its problems", async () => {
  const run = await runAdminCli(["config", "check"], {
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    // Refused (a URL must not carry credentials), but what it carries is still a secret.
    GITLAB_URL: "https://ops:url-password-1@also-password-1@gitlab.example",
    BASE_URL: "https://url-token-2@auth.example",
    MCP_UPSTREAM_URL: "http://ops:url-password-3@[bad/mcp",
    // A password holding a `/`: the URL does not parse, and its user info seems to end early.
    MCP_RESOURCE_URL: "https://ops:url/password-5@auth.example/mcp",
  });
  assert.equal(run.code, 1, run.stderr);
  const output = run.stdout + run.stderr;
  const secrets = ["url-password-1", "password-1@", "url-token-2", "url-password-3", "password-5"];
  for (const secret of secrets) {
    assert.ok(!output.includes(secret), `${secret} shown:\n${output}`);
  }
  assert.ok(linesOf(run.stdout).includes("GITLAB_URL=https://****@gitlab.example"), run.stdout);
  assert.match(run.stderr, /GITLAB_URL: must not carry a user name or password/);
  assert.match(run.stderr, /MCP_UPSTREAM_URL: is not a valid URL: "http:\/\/\*\*\*\*@\[bad\/mcp"/);
  assert.ok(linesOf(run.stdout).includes("MCP_RESOURCE_URL=https://****@auth.example/mcp"));
  // Every other command refuses such a configuration in one line, without the password too.
  const stats = await runAdminCli(["stats"], {
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: "/tmp/kv.sqlite3",
    GITLAB_URL: "https://ops:url-password-4@[bad",
  });
  assert.equal(stats.code, 1, stats.stderr);
  assert.ok(!stats.stderr.includes("url-password-4"), stats.stderr);
  assert.match(stats.stderr, /^admin: configuration error: GITLAB_URL: is not a valid URL/);
});
