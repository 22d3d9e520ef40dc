/**
 * Start-up as an operator meets it: `deno run main.ts start` with one wrong variable stops before
 * listening, with exit code 1 and one line naming the variable (never a stack trace).
 */

import assert from "node:assert/strict";
import { TEST_SECRET } from "./_helpers.ts";
import { runAdminCli, spawnService } from "./_service.ts";

/** The lines of a start-up that must be refused (warnings left out); fails if it listens. */
async function refusedStartup(env: Record<string, string>): Promise<string[]> {
  const configured = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET, KV_PATH: ":memory:" };
  let service: Awaited<ReturnType<typeof spawnService>>;
  try {
    service = await spawnService({ ...configured, ...env });
  } catch (error) {
    const [, ...logs] = String((error as Error).message).split("\n");
    return logs.filter((line) => line.trim() !== "" && !line.includes('"warn"'));
  }
  await service.stop();
  assert.fail(`the service started with ${JSON.stringify(env)}`);
}

function assertOneLineNaming(lines: string[], variable: string): string {
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.match(lines[0], new RegExp(`configuration error: ${variable}: `));
  assert.doesNotMatch(lines[0], /\bat \S+:\d+/, "no stack trace");
  return lines[0];
}

Deno.test("a rate limit whose window overflows the store's expiry stops start-up (it answered every /token 500)", async () => {
  const lines = await refusedStartup({ RATE_LIMIT_TOKEN: "1/99999999999999999999" });
  assert.match(assertOneLineNaming(lines, "RATE_LIMIT_TOKEN"), /seconds 1 to 31536000/);
});

Deno.test("an allow-list of commas alone stops start-up: it admitted every account", async () => {
  const lines = await refusedStartup({ ALLOWED_GITLAB_GROUPS: " , " });
  assert.match(assertOneLineNaming(lines, "ALLOWED_GITLAB_GROUPS"), /lists no group/);
});

Deno.test("BASE_URL with a bare # stops start-up: it was the issuer, # and all", async () => {
  const lines = await refusedStartup({ BASE_URL: "https://auth.example/#" });
  assert.match(assertOneLineNaming(lines, "BASE_URL"), /must not have a query or fragment/);
});

Deno.test("a URL whose password holds a / stops start-up without showing it", async () => {
  const lines = await refusedStartup({
    GITLAB_URL: "https://bot:glpat/url-secret-1@gitlab.example",
  });
  const line = assertOneLineNaming(lines, "GITLAB_URL");
  assert.ok(!line.includes("url-secret-1"), line);
  assert.match(line, /https:\/\/\*\*\*\*@gitlab\.example/);
});

Deno.test("a mistyped variable, or a file form of one that has none, is named in a warning", async () => {
  const service = await spawnService({
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
    ALLOWED_GITLAB_GROUP: "acme-typo-value",
    BASE_URL_FILE: "/run/secrets/base-url",
  });
  try {
    const warnings = service.logs.filter((line) => line.includes('"warn"'));
    assert.ok(
      warnings.some((line) =>
        line.includes("ALLOWED_GITLAB_GROUP is ignored: did you mean ALLOWED_GITLAB_GROUPS?")
      ),
      warnings.join("\n"),
    );
    assert.ok(warnings.some((line) => line.includes("BASE_URL_FILE is ignored: only secrets")));
    assert.ok(!service.logs.join("\n").includes("acme-typo-value"), "never the value");
  } finally {
    await service.stop();
  }
});

Deno.test("a mistyped name is named before start-up stops at what it meant", async () => {
  const typo = {
    SECURITY_PROFILE: "strict",
    ALLOW_ANY_GITLAB_USER: "true",
    BASEURL: "https://a.example",
  };
  let logs = "";
  await assert.rejects(
    spawnService({
      GITLAB_CLIENT_ID: "app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: ":memory:",
      ...typo,
    }),
    (error: Error) => (logs = error.message, true),
  );
  assert.match(logs, /BASEURL is ignored: did you mean BASE_URL\?/);
  assert.match(logs, /configuration error: BASE_URL: is required with SECURITY_PROFILE=strict/);
});

Deno.test("INTROSPECTION_TOKENS_FILE of one token per line stops start-up: it was one token no caller could send", async () => {
  const dir = await Deno.makeTempDir({ prefix: "config-startup-" });
  try {
    const tokens = ["a", "b"].map((letter) => `caller-${letter}-token-of-at-least-32-bytes!!`);
    await Deno.writeTextFile(`${dir}/callers`, `${tokens.join("\n")}\n`);
    const lines = await refusedStartup({ INTROSPECTION_TOKENS_FILE: `${dir}/callers` });
    const line = assertOneLineNaming(lines, "INTROSPECTION_TOKENS");
    assert.match(line, /separate tokens with commas/);
    assert.ok(tokens.every((token) => !line.includes(token)), "never a token");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** What `admin config check` reports for `env`, as the problem lines after `admin: `. */
async function configCheckProblems(env: Record<string, string>): Promise<string[]> {
  const run = await runAdminCli(["config", "check"], env);
  assert.equal(run.code, 1, `config check passed what start-up refuses: ${run.stderr}`);
  return run.stderr.split("\n").filter((line) =>
    line.startsWith("admin: ") && !line.startsWith("admin: warning: ")
  ).map((line) => line.slice("admin: ".length));
}

Deno.test("admin config check reports what start-up stops at", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "config-startup-" });
  try {
    // A server's own policy naming a group reads memberships, which read_user cannot.
    await Deno.writeTextFile(
      `${dir}/policy.json`,
      JSON.stringify({ rules: [{ tools: ["*"], allow: { groups: ["acme"] } }] }),
    );
    await Deno.writeTextFile(
      `${dir}/servers.yaml`,
      "servers:\n  - name: docs\n    url: http://127.0.0.1:9/mcp\n    policy_file: ./policy.json\n",
    );
    const cases: [string, Record<string, string>, string][] = [
      ["an unknown UPSTREAM_PROVIDER", { UPSTREAM_PROVIDER: "github" }, "UPSTREAM_PROVIDER"],
      [
        "a server's policy naming groups without read_api",
        { GITLAB_SCOPES: "read_user", MCP_SERVERS_FILE: `${dir}/servers.yaml` },
        "MCP_SERVERS_FILE",
      ],
    ];
    for (const [what, env, variable] of cases) {
      await t.step(what, async () => {
        const [line] = await refusedStartup(env);
        const stoppedAt = assertOneLineNaming([line], variable);
        const problem = JSON.parse(stoppedAt).message.replace(/^configuration error: /, "");
        const configured = {
          GITLAB_CLIENT_ID: "app",
          JWT_SECRET: TEST_SECRET,
          KV_PATH: ":memory:",
        };
        assert.deepEqual(await configCheckProblems({ ...configured, ...env }), [problem]);
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
