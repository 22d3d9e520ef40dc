/**
 * Rotating ENCRYPTION_KEY across several instances sharing one store (docs/security.md
 * "Rotating ENCRYPTION_KEY"): in two steps, each on every instance before the next (first the
 * new key as ENCRYPTION_KEY_PREVIOUS beside the old, then the swap), sessions sealed with the
 * old key keep refreshing and reaching the MCP server with their GitLab token on every instance,
 * and each is sealed again with the new key when next written; once ENCRYPTION_KEY_PREVIOUS is
 * removed, a session never written since is gone. The same holds when ENCRYPTION_KEY is set
 * where the key was derived from JWT_SECRET (ENCRYPTION_KEY_PREVIOUS=<JWT_SECRET>), and when it is
 * unset again. The keys reach no log line and `admin config check` shows them as `****`.
 */

import assert from "node:assert/strict";
import { mcpRequest, startScripted } from "./_gateway.ts";
import {
  FakeClock,
  FakeUpstream,
  issueTokens,
  makeTestApp,
  refresh,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { runAdminCli, signInOverHttp, spawnService, withGitLab } from "./_service.ts";
import { createLogger } from "../src/logger.ts";
import { createSecretBox } from "../src/secret_box.ts";
import { sessionKey } from "../src/store/keys.ts";
import type { SessionRecord } from "../src/store/records.ts";
import { sessionIdOf } from "../src/store/session_tokens.ts";

const OLD = "the-encryption-key-before-the-rotation-32-bytes+";
const NEW = "the-encryption-key-after-the-rotation-32-bytes++";

interface Tokens {
  access_token: string;
  refresh_token: string;
}

/** Instances over one KV file, with the clock, GitLab, MCP server and log they share. */
async function instances() {
  const dir = await Deno.makeTempDir({ prefix: "encryption-key-rotation-" });
  const mcp = startScripted((request) =>
    Response.json({ jsonrpc: "2.0", id: 1, result: { seen: request.headers.get("authorization") } })
  );
  const clock = new FakeClock();
  const upstream = new FakeUpstream();
  const logs: string[] = [];
  const apps: TestApp[] = [];
  return {
    logs,
    async start(env: Record<string, string>): Promise<TestApp> {
      const app = await makeTestApp({
        env: { MCP_UPSTREAM_URL: mcp.url, ...env },
        kvPath: `${dir}/kv`,
        clock,
        upstream,
        logger: createLogger((line) => logs.push(line)),
      });
      apps.push(app);
      return app;
    },
    async close() {
      for (const app of apps) app.close();
      await mcp.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** The status of an MCP call at `t` and the GitLab token the MCP server was sent with it. */
async function gatewayCall(t: TestApp, token: string): Promise<[number, string | undefined]> {
  const response = await mcpRequest(t, token, { body: "{}" });
  if (response.status !== 200) {
    await response.body?.cancel();
    return [response.status, undefined];
  }
  return [200, (await response.json()).result.seen];
}

async function refreshedAt(t: TestApp, tokens: Tokens): Promise<Tokens> {
  const response = await refresh(t, tokens.refresh_token);
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body;
}

async function refreshRefused(t: TestApp, tokens: Tokens): Promise<void> {
  const response = await refresh(t, tokens.refresh_token);
  assert.deepEqual([response.status, (await response.json()).error], [400, "invalid_grant"]);
}

/** Which of `keys` the stored session's GitLab tokens are sealed with (read from the KV). */
async function sealedWith(t: TestApp, tokens: Tokens, keys: string[]): Promise<string> {
  const stored = await t.kv.get<SessionRecord>(sessionKey(sessionIdOf(tokens.refresh_token)!));
  assert.ok(stored.value, "the session is stored");
  for (const key of keys) {
    const opened = await createSecretBox([key]).open(stored.value.sealedUpstreamTokens)
      .catch(() => undefined);
    if (opened) return key;
  }
  return "none of them";
}

/**
 * Takes a session sealed with `from` through the two steps to `to`, then drops
 * ENCRYPTION_KEY_PREVIOUS: `settings(key)` is the environment sealing with `key`.
 */
async function rotate(
  from: string,
  to: string,
  settings: (key: string) => Record<string, string>,
): Promise<void> {
  const rig = await instances();
  try {
    const before = await rig.start(settings(from));
    let moving: Tokens = await issueTokens(before);
    before.upstream.approve({ accessToken: "gl-access-idle" });
    const idle: Tokens = await issueTokens(before);
    const [movingGitLab, idleGitLab] = ["Bearer gl-access-0", "Bearer gl-access-idle"];

    // Step 1, one instance at a time: the new key opens, the old one still seals.
    const announced = await rig.start({ ...settings(from), ENCRYPTION_KEY_PREVIOUS: to });
    for (const [at, other] of [[announced, before], [before, announced]]) {
      moving = await refreshedAt(at, moving);
      assert.deepEqual(await gatewayCall(other, moving.access_token), [200, movingGitLab]);
      assert.equal(await sealedWith(at, moving, [from, to]), from);
    }

    // Step 2, once step 1 is on every instance: the swap, the old key as the previous one.
    const rotated = await rig.start({ ...settings(to), ENCRYPTION_KEY_PREVIOUS: from });
    assert.deepEqual(await gatewayCall(rotated, idle.access_token), [200, idleGitLab]);
    // Each write seals with the writer's key: what one instance wrote, every other opens.
    const seals = [[rotated, announced, to], [announced, rotated, from], [rotated, announced, to]];
    for (const [at, other, key] of seals as [TestApp, TestApp, string][]) {
      moving = await refreshedAt(at, moving);
      assert.deepEqual(await gatewayCall(other, moving.access_token), [200, movingGitLab]);
      assert.equal(await sealedWith(at, moving, [from, to]), key, "sealed by the writer's key");
    }
    assert.equal(await sealedWith(rotated, idle, [from, to]), from, "never written since");

    // ENCRYPTION_KEY_PREVIOUS removed: what was written since lives, the rest is gone.
    const after = await rig.start(settings(to));
    moving = await refreshedAt(after, moving);
    assert.deepEqual(await gatewayCall(after, moving.access_token), [200, movingGitLab]);
    assert.deepEqual(await gatewayCall(after, idle.access_token), [401, undefined]);
    await refreshRefused(after, idle);

    const logged = rig.logs.join("\n");
    assert.ok(rig.logs.length > 0, "requests were logged");
    for (const secret of [from, to]) assert.ok(!logged.includes(secret), "no key logged");
  } finally {
    await rig.close();
  }
}

Deno.test("ENCRYPTION_KEY rotation across instances in two steps: sessions live on, resealed as written", () =>
  rotate(OLD, NEW, (key) => ({ ENCRYPTION_KEY: key })));

Deno.test("ENCRYPTION_KEY set where it was derived from JWT_SECRET: the JWT_SECRET as ENCRYPTION_KEY_PREVIOUS", () =>
  rotate(
    TEST_SECRET,
    NEW,
    (key): Record<string, string> =>
      key === TEST_SECRET ? { JWT_SECRET: TEST_SECRET } : { ENCRYPTION_KEY: key },
  ));

Deno.test("ENCRYPTION_KEY unset again: the key derived from JWT_SECRET seals, ENCRYPTION_KEY_PREVIOUS opens", () =>
  rotate(
    NEW,
    TEST_SECRET,
    (key): Record<string, string> =>
      key === TEST_SECRET ? { JWT_SECRET: TEST_SECRET } : { ENCRYPTION_KEY: key },
  ));

Deno.test("ENCRYPTION_KEY_PREVIOUS_FILE: a service process opens the old key's sessions, the admin CLI revokes them, no key is logged or shown", () =>
  withGitLab(async (gitlab) => {
    const dir = await Deno.makeTempDir({ prefix: "encryption-key-previous-file-" });
    try {
      const base = {
        GITLAB_URL: gitlab.url.href,
        GITLAB_CLIENT_ID: "app",
        KV_PATH: `${dir}/kv.sqlite3`,
        JWT_SECRET: TEST_SECRET,
      };
      const before = await spawnService({ ...base, ENCRYPTION_KEY: OLD });
      let tokens;
      try {
        tokens = await signInOverHttp(before.url, gitlab);
        // A second session, which nothing writes again before the CLI revokes it.
        await signInOverHttp(before.url, gitlab);
      } finally {
        await before.stop();
      }
      await Deno.writeTextFile(`${dir}/previous`, `${OLD}\n`);
      const rotated = {
        ...base,
        ENCRYPTION_KEY: NEW,
        ENCRYPTION_KEY_PREVIOUS_FILE: `${dir}/previous`,
      };
      const after = await spawnService(rotated);
      try {
        const response = await fetch(`${after.url}/token`, {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({
            grant_type: "refresh_token",
            refresh_token: String(tokens.refresh_token),
          }),
        });
        assert.equal(response.status, 200, await response.clone().text());
        await response.body?.cancel();
        const logs = after.logs.join("\n");
        for (const secret of [OLD, NEW]) assert.ok(!logs.includes(secret), "no key logged");
      } finally {
        await after.stop();
      }
      const check = await runAdminCli(["config", "check"], rotated);
      assert.equal(check.code, 0, check.stderr);
      const lines = check.stdout.split("\n");
      assert.ok(lines.includes("ENCRYPTION_KEY=****"));
      assert.ok(lines.includes("ENCRYPTION_KEY_PREVIOUS=****"), check.stdout);
      assert.ok(lines.includes(`ENCRYPTION_KEY_PREVIOUS_FILE=${dir}/previous`));
      for (const secret of [OLD, NEW]) {
        assert.ok(!check.stdout.includes(secret) && !check.stderr.includes(secret));
      }
      // The CLI refuses to end any session whose GitLab tokens it cannot open: with the same
      // variables it opens both, the one resealed with the new key and the one still under the old.
      const revokedBefore = gitlab.revokedTokens.size;
      const revoked = await runAdminCli(["sessions", "revoke", "--user", "ada"], rotated);
      assert.equal(revoked.code, 0, revoked.stderr);
      assert.ok(gitlab.revokedTokens.size > revokedBefore, "GitLab tokens opened and revoked");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }));
