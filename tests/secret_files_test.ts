/**
 * Secrets from files (issue 38 §2): `NAME_FILE` for every secret variable holds what `NAME`
 * would, one trailing newline removed; both set, an unreadable file and an empty one stop
 * start-up (and the admin CLI) with one line naming `NAME_FILE`, never the secret. Over real
 * processes: the service signs in and signs with a secret from a file, serves /metrics with a
 * token from a file, and the admin CLI reaches PostgreSQL through DATABASE_URL_FILE.
 */

import assert from "node:assert/strict";
import { jwtVerify } from "jose";
import { listConfigVariables } from "../src/app/config.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";
import { denoRunArgs, runAdminCli, signInOverHttp, spawnWithGitLab } from "./_service.ts";

const MAIN = new URL("../main.ts", import.meta.url).pathname;
const FILE_SECRET = "a-secret-that-lives-in-a-file-and-is-32-bytes-or-more";
const METRICS_SECRET = "metrics-token-from-a-file-at-least-32-bytes!";

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "secret-files-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** `main.ts start` with only `env`: its exit code and everything it printed. */
async function start(env: Record<string, string>): Promise<{ code: number; output: string }> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: denoRunArgs(MAIN, ["start"]),
    env: { PATH: Deno.env.get("PATH") ?? "", HOME: Deno.env.get("HOME") ?? "", PORT: "0", ...env },
    clearEnv: true,
    stdin: "null",
    // A service that did start (the file ignored) is stopped: the test then fails on its output.
    signal: AbortSignal.timeout(15_000),
  }).output();
  const decoder = new TextDecoder();
  return { code, output: (decoder.decode(stdout) + decoder.decode(stderr)).trim() };
}

Deno.test("every secret variable has its _FILE form in the variable table", () => {
  const names = listConfigVariables().map((variable) => variable.name);
  for (
    const secret of [
      "JWT_SECRET",
      "JWT_SECRET_PREVIOUS",
      "ENCRYPTION_KEY",
      "ENCRYPTION_KEY_PREVIOUS",
      "GITLAB_CLIENT_SECRET",
      "DATABASE_URL",
      "METRICS_TOKEN",
      "INTROSPECTION_TOKENS",
    ]
  ) {
    assert.ok(names.includes(`${secret}_FILE`), secret);
  }
});

Deno.test("a secret's _FILE set with it, unreadable or empty stops start-up and the CLI in one line naming it", () =>
  withDir(async (dir) => {
    const empty = `${dir}/empty`;
    await Deno.writeTextFile(empty, "\n");
    const good = `${dir}/good`;
    await Deno.writeTextFile(good, `${FILE_SECRET}\n`);
    const base = { GITLAB_CLIENT_ID: "app", KV_PATH: ":memory:" };
    const cases: [Record<string, string>, RegExp][] = [
      [
        { JWT_SECRET: TEST_SECRET, JWT_SECRET_FILE: good },
        /JWT_SECRET_FILE: is set and so is JWT_SECRET/,
      ],
      [
        { JWT_SECRET_FILE: `${dir}/missing` },
        /JWT_SECRET_FILE: cannot read .*missing \(NotFound\)/,
      ],
      [{ JWT_SECRET_FILE: empty }, /JWT_SECRET_FILE: .*empty is empty/],
      [
        { JWT_SECRET: TEST_SECRET, METRICS_TOKEN: METRICS_SECRET, METRICS_TOKEN_FILE: good },
        /METRICS_TOKEN_FILE: is set and so is METRICS_TOKEN/,
      ],
    ];
    for (const [env, expected] of cases) {
      const { code, output } = await start({ ...base, ...env });
      assert.notEqual(code, 0, output);
      assert.match(output, expected);
      assert.equal(output.split("\n").length, 1, `one line: ${output}`);
      assert.ok(!output.includes(FILE_SECRET) && !output.includes(TEST_SECRET), output);
      assert.ok(!output.includes("    at "), `no stack trace: ${output}`);
      const admin = await runAdminCli(["sessions", "list"], { ...base, ...env });
      assert.notEqual(admin.code, 0, admin.stderr);
      assert.match(admin.stderr + admin.stdout, expected);
      assert.ok(!(admin.stderr + admin.stdout).includes(FILE_SECRET));
    }
  }));

Deno.test("a service whose JWT_SECRET, GITLAB_CLIENT_SECRET and METRICS_TOKEN come from files signs in and serves", () =>
  withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/jwt`, `${FILE_SECRET}\n`);
    await Deno.writeTextFile(`${dir}/metrics`, `${METRICS_SECRET}\r\n`);
    await Deno.writeTextFile(`${dir}/gitlab`, "gitlab-app-secret\n");
    const { gitlab, service, close } = await spawnWithGitLab("gitlab-app-id", {
      JWT_SECRET: "",
      JWT_SECRET_FILE: `${dir}/jwt`,
      METRICS_TOKEN_FILE: `${dir}/metrics`,
      GITLAB_CLIENT_SECRET_FILE: `${dir}/gitlab`,
    });
    try {
      const tokens = await signInOverHttp(service.url, gitlab);
      const key = new TextEncoder().encode(FILE_SECRET);
      const { payload } = await jwtVerify(tokens.access_token, key, { algorithms: ["HS256"] });
      assert.ok(payload.sub);
      const metrics = await fetch(`${service.url}/metrics`, {
        headers: { Authorization: `Bearer ${METRICS_SECRET}` },
      });
      await metrics.body?.cancel();
      assert.equal(metrics.status, 200);
      assert.ok(!service.logs.join("\n").includes(FILE_SECRET), "the secret is never logged");
    } finally {
      await close();
    }
  }));

Deno.test({
  name: "DATABASE_URL_FILE: the admin CLI reaches PostgreSQL through it",
  ignore: ignorePostgresTests,
  fn: () =>
    withDir(async (dir) => {
      const url = await (await sharedPostgres()).createDatabase();
      await Deno.writeTextFile(`${dir}/database`, `${url}\n`);
      const env = { DATABASE_URL_FILE: `${dir}/database`, JWT_SECRET: TEST_SECRET };
      const migrated = await runAdminCli(["migrate"], env);
      assert.equal(migrated.code, 0, migrated.stderr);
      const listed = await runAdminCli(["sessions", "list"], env);
      assert.equal(listed.code, 0, listed.stderr);
    }),
});
