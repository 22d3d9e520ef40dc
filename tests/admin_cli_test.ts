/**
 * The operator's CLI (`main.ts admin …`) run as a separate process on the file KV of a live
 * service (a child process in gateway mode, with the simulated GitLab): offboarding a user ends
 * their sessions (refresh → invalid_grant at once, gateway → 401 within the one second it may
 * remember an accepted token) and revokes their GitLab
 * tokens, others keep theirs; lists never show a token; bad arguments exit 2 with the usage.
 */

import assert from "node:assert/strict";
import { loadConfig } from "../src/app/config.ts";
import { VERIFIED_TOKEN_TTL_MS } from "../src/gateway/verified_tokens.ts";
import { runStoreCommand } from "../src/admin/commands.ts";
import { silentLogger } from "../src/logger.ts";
import {
  exchange,
  issueCode,
  PKCE,
  register,
  TEST_REDIRECT,
  TEST_SECRET,
  withApp,
} from "./_helpers.ts";
import { postInitialize } from "./_mcp_client.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import {
  authorizeOverHttp,
  type CommandRun,
  fetchJson,
  type Json,
  pollOverHttp,
  postToken,
  runAdminCli,
  type ServiceWithGitLab,
  signInOverHttp,
  spawnWithGitLab,
} from "./_service.ts";

const GRACE = { id: 77, username: "grace", name: "Grace Hopper" };

const METRICS_TOKEN = "metrics-token-that-is-at-least-32-bytes!";

/** The service's `revocations_total{outcome="operator"}`, scraped from its `/metrics`. */
async function operatorRevocations(serviceUrl: string): Promise<number> {
  const response = await fetch(`${serviceUrl}/metrics`, {
    headers: { Authorization: `Bearer ${METRICS_TOKEN}` },
  });
  const text = await response.text();
  const sample = text.match(/^gitlab_mcp_auth_revocations_total\{outcome="operator"\} (\d+)$/m);
  assert.ok(sample, text);
  return Number(sample[1]);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** JSON lines of a CLI run's output. */
function jsonLines(text: string): Json[] {
  return text.trim().split("\n").filter((line) => line !== "").map((line) => JSON.parse(line));
}

/** An MCP `initialize` through the gateway with `accessToken`; answers the status. */
async function gatewayStatus(serviceUrl: string, accessToken: string): Promise<number> {
  const response = await postInitialize(serviceUrl, accessToken, "admin-test");
  await response.body?.cancel();
  return response.status;
}

/** A live service (child process) on a file KV, and the CLI run on that KV. */
interface Live extends ServiceWithGitLab {
  /** Runs `main.ts admin …args` with the service's configuration. */
  admin(args: string[]): Promise<CommandRun>;
  /** The service's KV file. */
  kvPath: string;
}

/** Runs `fn` against a live service on a fresh file KV, `env` added to its configuration. */
async function withLiveService(
  env: Record<string, string>,
  fn: (live: Live) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir();
  const shared = {
    GITLAB_CLIENT_ID: "admin-test-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/kv.sqlite3`,
  };
  const started = await spawnWithGitLab(shared.GITLAB_CLIENT_ID, { ...shared, ...env });
  const cliEnv = { ...shared, GITLAB_URL: started.gitlab.url.href };
  try {
    await fn({ ...started, admin: (args) => runAdminCli(args, cliEnv), kvPath: shared.KV_PATH });
  } finally {
    await started.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test({
  name:
    "admin: sessions revoke --user ends a live service's sessions (the gateway's too within 1 s), GitLab tokens too, counted in its metrics",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const mcp = startMcpUpstream();
    try {
      const env = { MCP_UPSTREAM_URL: mcp.url, METRICS_TOKEN };
      await withLiveService(env, async ({ gitlab, service, admin }) => {
        gitlab.users.push(GRACE);
        const adaTokens = [
          await signInOverHttp(service.url, gitlab),
          await signInOverHttp(service.url, gitlab),
        ];
        const graceTokens = await signInOverHttp(service.url, gitlab, { userId: GRACE.id });
        for (const tokens of [...adaTokens, graceTokens]) {
          assert.equal(await gatewayStatus(service.url, tokens.access_token), 200);
        }

        const listed = await admin(["sessions", "list", "--user", "ADA", "--json"]);
        assert.equal(listed.code, 0, listed.stderr);
        const sessions = jsonLines(listed.stdout);
        assert.equal(sessions.length, 2);
        assert.deepEqual(sessions.map((s) => s.username), ["ada", "ada"]);
        const table = await admin(["sessions", "list"]);
        assert.equal(table.code, 0, table.stderr);
        assert.match(table.stdout, /grace \(77\)/);
        assert.match(table.stdout, /3 session\(s\)/);
        for (const tokens of [...adaTokens, graceTokens]) {
          for (const output of [listed.stdout, table.stdout]) {
            assert.ok(!output.includes(tokens.refresh_token), "no refresh token listed");
            assert.ok(!output.includes(tokens.access_token), "no access token listed");
          }
        }
        const revokedBefore = gitlab.revokedTokens.size;

        const revokedAt = Date.now();
        const revoked = await admin(["sessions", "revoke", "--user", "ada"]);
        assert.equal(revoked.code, 0, revoked.stderr);
        const [action] = jsonLines(revoked.stdout).filter((l) => l.message === "operator action");
        assert.deepEqual(
          {
            action: action.action,
            user: action.user,
            sessions: action.sessions,
            revoked: action.gitlabTokensRevoked,
          },
          { action: "sessions revoke", user: "ada", sessions: 2, revoked: 2 },
        );
        assert.equal(gitlab.revokedTokens.size, revokedBefore + 2, "both GitLab tokens revoked");
        assert.equal(await operatorRevocations(service.url), 2, "the service counts the CLI's");

        for (const tokens of adaTokens) {
          const refreshed = await postToken(service.url, {
            grant_type: "refresh_token",
            refresh_token: tokens.refresh_token,
          });
          assert.equal(refreshed.status, 400);
          assert.equal(refreshed.body.error, "invalid_grant");
        }
        // The gateway accepted these tokens a moment ago and may remember them for at most
        // VERIFIED_TOKEN_TTL_MS: the revocation bites within that, in another process.
        await delay(revokedAt + VERIFIED_TOKEN_TTL_MS - Date.now());
        for (const tokens of adaTokens) {
          assert.equal(await gatewayStatus(service.url, tokens.access_token), 401);
        }
        assert.equal(await gatewayStatus(service.url, graceTokens.access_token), 200);
        const graceRefresh = await postToken(service.url, {
          grant_type: "refresh_token",
          refresh_token: graceTokens.refresh_token,
        });
        assert.equal(graceRefresh.status, 200, "another user's session is untouched");

        const byId = await admin(["sessions", "list", "--user", "77", "--json"]);
        const [graceSession] = jsonLines(byId.stdout);
        assert.equal(graceSession.username, "grace");
        const one = await admin(["sessions", "revoke", "--id", graceSession.id]);
        assert.equal(one.code, 0, one.stderr);
        assert.equal(await gatewayStatus(service.url, graceRefresh.body.access_token), 401);
        const again = await admin(["sessions", "revoke", "--id", graceSession.id]);
        assert.equal(again.code, 1, "an ended session is not there to end");
        const revokedOne = Date.now();
        let counted = 0;
        while ((counted = await operatorRevocations(service.url)) < 3) {
          if (Date.now() - revokedOne > 10_000) break;
          await delay(250);
        }
        assert.equal(counted, 3);
        assert.ok(Date.now() - revokedOne < 10_000, "the count arrives within 10 s");

        const stats = await admin(["stats", "--json"]);
        assert.equal(stats.code, 0, stats.stderr);
        const [counts] = jsonLines(stats.stdout);
        assert.equal(counts.sessions, 0);
        assert.ok(counts.kvFileBytes > 0, JSON.stringify(counts));
      });
    } finally {
      await mcp.close();
    }
  },
});

Deno.test({
  name: "admin: clients list and delete on a live service's KV; a deleted client cannot sign in",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withLiveService(
      { REDIRECT_URI_POLICY: "registered" },
      async ({ gitlab, service, admin }) => {
        const redirectUri = "http://127.0.0.1:9999/callback";
        const registered = await fetchJson(`${service.url}/register`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ client_name: "Doomed", redirect_uris: [redirectUri] }),
        });
        assert.equal(registered.status, 201, JSON.stringify(registered.body));
        const clientId: string = registered.body.client_id;
        const { flowState } = await authorizeOverHttp(service.url, {
          client_id: clientId,
          redirect_uri: redirectUri,
        });
        gitlab.approve(gitlab.lastUserCode()!);
        const done = await pollOverHttp(service.url, flowState);
        const { body: tokens } = await postToken(service.url, {
          grant_type: "authorization_code",
          client_id: clientId,
          code: done.body.code,
          code_verifier: PKCE.verifier,
          redirect_uri: redirectUri,
        });
        assert.ok(tokens.refresh_token, JSON.stringify(tokens));

        const listed = await admin(["clients", "list", "--json"]);
        assert.equal(listed.code, 0, listed.stderr);
        assert.deepEqual(
          jsonLines(listed.stdout).map(({ clientId, name }) => ({ clientId, name })),
          [{ clientId, name: "Doomed" }],
        );

        const deleted = await admin(["clients", "delete", clientId]);
        assert.equal(deleted.code, 0, deleted.stderr);
        const [action] = jsonLines(deleted.stdout).filter((l) => l.message === "operator action");
        assert.equal(action.action, "clients delete");
        assert.equal(action.sessions, 1, "the client's session ended with it");
        const refreshed = await postToken(service.url, {
          grant_type: "refresh_token",
          refresh_token: tokens.refresh_token,
        });
        assert.equal(refreshed.body.error, "invalid_grant");
        const authorize = await fetch(
          `${service.url}/authorize?response_type=code&client_id=${clientId}` +
            `&redirect_uri=${encodeURIComponent(redirectUri)}&code_challenge=${"a".repeat(43)}` +
            "&code_challenge_method=S256",
        );
        await authorize.body?.cancel();
        assert.equal(authorize.status, 400, "an unregistered client is refused");

        const missing = await admin(["clients", "delete", clientId]);
        assert.equal(missing.code, 1);
      },
    );
  },
});

Deno.test("admin: bad arguments print the usage and exit 2, a bad setup one line and 1", async () => {
  for (
    const args of [
      [],
      ["bogus"],
      ["sessions", "revoke"],
      ["sessions", "revoke", "--user", "ada", "--id", "x"],
      ["sessions", "list", "--user"],
      ["sessions", "list", "--token"],
      ["clients", "delete"],
      ["stats", "extra"],
    ]
  ) {
    const run = await runAdminCli(args, {});
    assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
    assert.match(run.stderr, /^usage: admin sessions list/m, args.join(" "));
    assert.equal(run.stdout, "");
  }
  const badConfig = await runAdminCli(["stats"], { JWT_SECRET: "short" });
  assert.equal(badConfig.code, 1);
  assert.match(badConfig.stderr, /^admin: configuration error: JWT_SECRET/);
  const noKv = await runAdminCli(["stats"], { KV_PATH: "/nonexistent/dir/kv.sqlite3" });
  assert.equal(noKv.code, 1);
  assert.match(noKv.stderr, /^admin: cannot open KV \/nonexistent/);
  const help = await runAdminCli(["help"], {});
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^usage: admin/);
});

/** Runs `fn` with a fresh folder holding an existing (empty) service KV file, then removes it. */
async function withKvFile(fn: (dir: string, kvPath: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "admin-kv-" });
  const kvPath = `${dir}/kv.sqlite3`;
  (await Deno.openKv(kvPath)).close();
  try {
    await fn(dir, kvPath);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function assertNoFile(path: string): Promise<void> {
  await assert.rejects(Deno.stat(path), Deno.errors.NotFound, `${path} was not created`);
}

Deno.test("admin: works only on an existing store: no KV_PATH, :memory: or a mistyped path is exit 1, nothing created", () =>
  withKvFile(async (dir) => {
    for (const args of [["stats"], ["sessions", "list"], ["sessions", "revoke", "--user", "ada"]]) {
      const unset = await runAdminCli(args, {});
      assert.equal(unset.code, 1, `${args.join(" ")}: ${unset.stderr}`);
      assert.match(unset.stderr, /^admin: KV_PATH is not set/);
      assert.equal(unset.stdout, "", "no count of an empty store");
    }
    const memory = await runAdminCli(["sessions", "list"], { KV_PATH: ":memory:" });
    assert.equal(memory.code, 1);
    assert.match(memory.stderr, /^admin: KV_PATH=:memory: is a store of this process alone/);

    const typo = `${dir}/kv.sqlite`;
    const mistyped = await runAdminCli(["sessions", "list"], { KV_PATH: typo });
    assert.equal(mistyped.code, 1, mistyped.stderr);
    assert.match(mistyped.stderr, /^admin: cannot open KV .*: no such file/);
    assert.equal(mistyped.stdout, "");
    await assertNoFile(typo);

    const folder = `${dir}/nowhere`;
    const noFolder = await runAdminCli(["stats"], { KV_PATH: `${folder}/kv.sqlite3` });
    assert.equal(noFolder.code, 1);
    assert.equal(noFolder.stderr.trim().split("\n").length, 1, noFolder.stderr);
    assert.ok(noFolder.stderr.includes(`the folder ${folder} does not exist`), noFolder.stderr);
  }));

Deno.test("admin: sessions revoke --user that matches no session ends nothing and exits 3", () =>
  withKvFile(async (_dir, kvPath) => {
    const env = { KV_PATH: kvPath, JWT_SECRET: TEST_SECRET, GITLAB_CLIENT_ID: "admin-test-app" };
    const run = await runAdminCli(["sessions", "revoke", "--user", "nobody"], env);
    assert.equal(run.code, 3, run.stderr);
    const lines = jsonLines(run.stdout);
    assert.ok(lines.some((line) => /no session/.test(line.message)), run.stdout);
    assert.ok(!lines.some((line) => line.message === "operator action"), "nothing was ended");
  }));

Deno.test({
  name:
    "admin: sessions revoke checks all revoking needs before deleting anything, and revokes with ENCRYPTION_KEY alone",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const key = "k".repeat(40);
    await withLiveService({ ENCRYPTION_KEY: key }, async ({ gitlab, service, kvPath }) => {
      const tokens = await signInOverHttp(service.url, gitlab);
      const cli = (env: Record<string, string>, extra: string[] = []) =>
        runAdminCli(["sessions", "revoke", "--user", "ada", ...extra], { KV_PATH: kvPath, ...env });
      const stillSignedIn = async () => {
        const listed = await runAdminCli(["sessions", "list", "--json"], {
          KV_PATH: kvPath,
          ENCRYPTION_KEY: key,
        });
        return jsonLines(listed.stdout).length === 1;
      };
      const revokedBefore = gitlab.revokedTokens.size;

      const noGitLab = await cli({ ENCRYPTION_KEY: key });
      assert.equal(noGitLab.code, 1, noGitLab.stderr);
      assert.match(
        noGitLab.stderr,
        /^admin: cannot revoke GitLab tokens: GITLAB_CLIENT_ID not set/,
      );
      assert.ok(await stillSignedIn(), "nothing was deleted");

      const gitlabEnv = { GITLAB_URL: gitlab.url.href, GITLAB_CLIENT_ID: "admin-test-app" };
      const noKey = await cli(gitlabEnv);
      assert.equal(noKey.code, 1, noKey.stderr);
      assert.match(noKey.stderr, /ENCRYPTION_KEY or JWT_SECRET not set/);
      assert.ok(await stillSignedIn(), "nothing was deleted");

      const wrongKey = await cli({ ...gitlabEnv, ENCRYPTION_KEY: "w".repeat(40) });
      assert.equal(wrongKey.code, 1, wrongKey.stderr);
      assert.match(wrongKey.stderr, /1 of 1 session\(s\) hold GitLab tokens sealed under a key/);
      assert.match(wrongKey.stderr, /ENCRYPTION_KEY/);
      assert.ok(await stillSignedIn(), "nothing was deleted");
      assert.equal(gitlab.revokedTokens.size, revokedBefore);

      // As docs/operating.md allows: ENCRYPTION_KEY without JWT_SECRET opens the GitLab tokens.
      const revoked = await cli({ ...gitlabEnv, ENCRYPTION_KEY: key });
      assert.equal(revoked.code, 0, revoked.stderr);
      const [action] = jsonLines(revoked.stdout).filter((l) => l.message === "operator action");
      assert.equal(action.sessions, 1);
      assert.equal(action.gitlabTokensRevoked, 1);
      assert.equal(gitlab.revokedTokens.size, revokedBefore + 1, "the GitLab token was revoked");
      const refreshed = await postToken(service.url, {
        grant_type: "refresh_token",
        refresh_token: tokens.refresh_token,
      });
      assert.equal(refreshed.body.error, "invalid_grant");
    });
  },
});

Deno.test({
  name: "admin: --keep-gitlab-tokens ends sessions this environment cannot revoke, and says so",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withLiveService({}, async ({ gitlab, service, kvPath }) => {
      await signInOverHttp(service.url, gitlab);
      const revokedBefore = gitlab.revokedTokens.size;
      const run = await runAdminCli(
        ["sessions", "revoke", "--user", "ada", "--keep-gitlab-tokens"],
        { KV_PATH: kvPath },
      );
      assert.equal(run.code, 0, run.stderr);
      const [action] = jsonLines(run.stdout).filter((l) => l.message === "operator action");
      assert.equal(action.sessions, 1);
      assert.equal(action.gitlabTokensKept, 1);
      assert.equal(gitlab.revokedTokens.size, revokedBefore);
    });
  },
});

Deno.test({
  name:
    "admin: --user says whether it matched a user id or a username, refuses when it matches both; --user-id and --username take one",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    // A GitLab username may be all digits: "77" is one user's name and another's id.
    const digits = { id: 5, username: "77", name: "Seventy Seven" };
    await withLiveService({}, async ({ gitlab, service, admin }) => {
      gitlab.users.push(GRACE, digits);
      await signInOverHttp(service.url, gitlab, { userId: GRACE.id });
      await signInOverHttp(service.url, gitlab, { userId: digits.id });
      await signInOverHttp(service.url, gitlab);
      const actionOf = (run: CommandRun) => {
        assert.equal(run.code, 0, run.stderr);
        return jsonLines(run.stdout).find((line) => line.message === "operator action");
      };
      const count = async () =>
        jsonLines((await admin(["sessions", "list", "--json"])).stdout).length;

      const both = await admin(["sessions", "revoke", "--user", "77"]);
      assert.equal(both.code, 2, both.stderr);
      assert.match(both.stderr, /the user id of grace \(77\) and the username of 77 \(5\)/);
      assert.match(both.stderr, /--user-id 77 or --username 77/);
      assert.equal(await count(), 3, "nothing was ended");

      const listed = await admin(["sessions", "list", "--user-id", "77", "--json"]);
      assert.deepEqual(jsonLines(listed.stdout).map((s) => s.username), ["grace"]);

      const byId = actionOf(await admin(["sessions", "revoke", "--user-id", "77"]));
      assert.deepEqual([byId?.matched, byId?.users, byId?.sessions], ["user id", "grace (77)", 1]);
      const byName = actionOf(await admin(["sessions", "revoke", "--username", "77"]));
      assert.deepEqual([byName?.matched, byName?.users, byName?.sessions], [
        "username",
        "77 (5)",
        1,
      ]);
      const ada = actionOf(await admin(["sessions", "revoke", "--user", "ADA"]));
      assert.deepEqual([ada?.matched, ada?.users], ["username", "ada (4242)"]);

      // Ids are text (a provider's may be a UUID); one with a space is no id at all.
      const bad = await admin(["sessions", "revoke", "--user-id", "a b"]);
      assert.equal(bad.code, 2);
      assert.match(bad.stderr, /--user-id takes a user id/);
      const two = await admin(["sessions", "list", "--user", "ada", "--username", "ada"]);
      assert.equal(two.code, 2);
    });
  },
});

Deno.test("admin: keys generate prints two fresh secrets the service accepts", async () => {
  const runs = [
    await runAdminCli(["keys", "generate"], {}),
    await runAdminCli(["keys", "generate"], {}),
  ];
  const values = runs.map((run) => {
    assert.equal(run.code, 0, run.stderr);
    return Object.fromEntries(run.stdout.trim().split("\n").map((line) => line.split(/=(.*)/s, 2)));
  });
  const config = loadConfig(values[0]);
  assert.equal(config.jwtSecret, values[0].JWT_SECRET);
  assert.equal(config.encryptionKey, values[0].ENCRYPTION_KEY);
  assert.notEqual(values[0].JWT_SECRET, values[0].ENCRYPTION_KEY);
  assert.notEqual(values[0].JWT_SECRET, values[1].JWT_SECRET, "fresh each time");
  // The rotation it advises is the one that keeps sessions on several instances (security.md).
  assert.match(runs[0].stderr, /rotate each in two steps/);
  assert.match(runs[0].stderr, /rotating JWT_SECRET, rotating ENCRYPTION_KEY/);
});

Deno.test("admin: lists print what a hostile client registered or sent as plain text, never a terminal control", () =>
  withApp(async (t) => {
    const hostile = "Evil\x1b[2J\x1b]8;;https://evil.example\x07\r\nFAKE  ROW\x9b1m";
    const registered = await register(t, {
      client_name: hostile,
      redirect_uris: [`${TEST_REDIRECT}/\x1b[31mred`],
    });
    assert.equal(registered.status, 201, await registered.clone().text());
    // The spec's default policy takes any client_id at /authorize.
    assert.equal((await exchange(t, await issueCode(t, { client_id: hostile }))).status, 200);

    for (const name of ["clients list", "sessions list"] as const) {
      const lines: string[] = [];
      const command = { name, json: false };
      const deps = {
        store: t.store,
        logger: silentLogger,
        print: (line: string) => lines.push(line),
      };
      assert.equal(
        await runStoreCommand(command, { ...deps, kvFileSize: () => Promise.resolve(0) }),
        0,
      );
      assert.equal(lines.length, 3, `${name}: header, one row, the count\n${lines.join("\n")}`);
      // deno-lint-ignore no-control-regex -- the controls are what must not be printed.
      assert.ok(lines.every((line) => !/[\x00-\x1f\x7f-\x9f]/.test(line)), lines.join("\n"));
      assert.ok(lines[1].includes("Evil\\u001b[2J"), `${name}: shown escaped\n${lines[1]}`);
    }
  }));
