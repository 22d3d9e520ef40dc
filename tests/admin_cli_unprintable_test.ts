/**
 * Issue 22 §1.15: format characters (U+202E right-to-left override, U+200B zero width space, the
 * bidi isolates) and C1 controls never reach the operator's terminal raw, neither in the tables
 * nor in `--json` lines; the JSON still parses back to the registered value.
 */

import assert from "node:assert/strict";
import { runStoreCommand } from "../src/admin/commands.ts";
import { silentLogger } from "../src/logger.ts";
import { exchange, issueCode, TEST_BASE, TEST_REDIRECT, TEST_SECRET, withApp } from "./_helpers.ts";
import { runAdminCli, signInOverHttp, spawnWithGitLab } from "./_service.ts";

const UNPRINTABLE = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

Deno.test("admin: tables and --json escape format characters and C1 controls", () =>
  withApp(async (t) => {
    const hostile = "Trusted\u202Egnp.exe\u200B\u2066x\u2069\u0085\u009b1m\u2028\u{E0041}";
    const registered = await t.app(
      new Request(`${TEST_BASE}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ client_name: hostile, redirect_uris: [TEST_REDIRECT] }),
      }),
    );
    assert.equal(registered.status, 201, await registered.clone().text());
    assert.equal((await exchange(t, await issueCode(t, { client_id: hostile }))).status, 200);

    for (const name of ["clients list", "sessions list"] as const) {
      for (const json of [false, true]) {
        const lines: string[] = [];
        const deps = {
          store: t.store,
          logger: silentLogger,
          print: (line: string) => lines.push(line),
          kvFileSize: () => Promise.resolve(0),
        };
        assert.equal(await runStoreCommand({ name, json }, deps), 0);
        const output = lines.join("\n");
        assert.ok(
          lines.every((line) => !UNPRINTABLE.test(line)),
          `${name} json=${json}: ${JSON.stringify(output)}`,
        );
        assert.ok(output.includes("Trusted\\u202egnp.exe\\u200b"), `${name} json=${json}`);
        if (json) {
          const values = lines.map((line) => JSON.parse(line));
          const field = name === "clients list" ? "name" : "clientId";
          assert.ok(values.some((v) => v[field] === hostile), `${name}: the value parses back`);
        }
      }
    }
  }));

/** Each line of `text` (a process's output) holds no control or format character. */
function assertPrintable(text: string, what: string): void {
  for (const line of text.split("\n")) {
    assert.ok(!UNPRINTABLE.test(line), `${what}: ${JSON.stringify(line)}`);
  }
}

Deno.test({
  name:
    "admin: a GitLab username never reaches the terminal raw, in a refusal on stderr or an operator action's log line",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir();
    const env = {
      GITLAB_CLIENT_ID: "admin-test-app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: `${dir}/kv.sqlite3`,
    };
    const started = await spawnWithGitLab(env.GITLAB_CLIENT_ID, env);
    const admin = (args: string[]) =>
      runAdminCli(["sessions", "revoke", ...args], {
        ...env,
        GITLAB_URL: started.gitlab.url.href,
      });
    // GitLab (or another provider, or a GitLab an attacker runs) names the user. Control
    // characters (an escape sequence, an 8-bit CSI) are refused where GitLab answers
    // (upstream_hostile_test); format characters and separators pass: a right-to-left
    // override, a zero width space, a bidi isolate, a line separator.
    const hostile = "eve\u202Eexe.txt\u200B\u2066x\u2069\u2028owned";
    try {
      const { gitlab, service } = started;
      gitlab.users.push({ id: 77, username: hostile, name: "Eve" });
      gitlab.users.push({ id: 78, username: "77", name: "Seventy-seven" });
      await signInOverHttp(service.url, gitlab, { userId: 77 });
      await signInOverHttp(service.url, gitlab, { userId: 78 });

      // `--user 77` is 77's id and 78's username: refused, naming both.
      const ambiguous = await admin(["--user", "77"]);
      assert.equal(ambiguous.code, 2, ambiguous.stderr);
      assert.match(ambiguous.stderr, /matches the user id of eve/);
      assertPrintable(ambiguous.stderr, "the refusal");

      const revoked = await admin(["--user-id", "77"]);
      assert.equal(revoked.code, 0, revoked.stderr);
      assertPrintable(revoked.stdout, "the log lines");
      const action = revoked.stdout.trim().split("\n").map((line) => JSON.parse(line))
        .find((line) => line.message === "operator action");
      assert.equal(action?.users, `${hostile} (77)`, "the log line parses back to the username");
    } finally {
      await started.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
