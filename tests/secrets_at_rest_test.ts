/**
 * Secrets at rest: whatever KV holds at any point of a sign-in, no authorization code, refresh
 * token, flow state, device code, GitLab token, access token or signing secret is in it in the
 * clear (nor merely base64- or hex-encoded). And the keys that seal them can change: a separate
 * ENCRYPTION_KEY works, a rotated JWT_SECRET with JWT_SECRET_PREVIOUS keeps sessions alive, and
 * one rotated without it ends them with invalid_grant, never a 500.
 */

import { createAppDeps } from "../src/app/deps.ts";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import assert from "node:assert/strict";
import { jwtVerify } from "jose";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { createApp, type FetchHandler } from "../src/app/app.ts";
import { loadConfig } from "../src/app/config.ts";
import { silentLogger } from "../src/logger.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  countRecords,
  exchange,
  gitlabTokensOf,
  issueTokens,
  kvText,
  poll,
  refresh,
  startFlow,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
  withEnv,
} from "./_helpers.ts";
import { postToken, signInOverHttp, spawnService } from "./_service.ts";

const ENCRYPTION_KEY = "a-separate-encryption-key-of-at-least-32-bytes";
const NEW_SECRET = "the-rotated-jwt-secret-also-at-least-32-bytes!!";

/** The forms a secret could be stored in without being protected. */
function encodings(secret: string): string[] {
  const bytes = new TextEncoder().encode(secret);
  return [
    secret,
    bytes.toBase64(),
    bytes.toBase64({ alphabet: "base64url", omitPadding: true }),
    bytes.toHex(),
  ];
}

/** Asserts that no secret appears in KV; `label` says at which point. */
async function assertNoSecretsInKv(kv: Deno.Kv, secrets: Map<string, string>, label: string) {
  const dump = await kvText(kv);
  for (const [name, secret] of secrets) {
    assert.ok(secret.length >= 8, `${name} is long enough to be searched for`);
    for (const form of encodings(secret)) {
      assert.ok(!dump.includes(form), `${label}: ${name} is stored in the clear`);
    }
  }
}

async function json(response: Response): Promise<Record<string, string>> {
  return await response.json();
}

/** Runs a whole sign-in, taking a look at KV after every step. */
async function fullFlowLeavesNoSecrets(t: TestApp, signingSecret: string): Promise<void> {
  const secrets = new Map<string, string>([
    ["JWT secret", signingSecret],
    ["device code", "device-code-at-rest-1"],
  ]);
  if (t.config.encryptionKey) secrets.set("encryption key", t.config.encryptionKey);
  t.upstream.device = { ...t.upstream.device, deviceCode: "device-code-at-rest-1" };

  const flowState = await startFlow(t);
  secrets.set("flow_state", flowState);
  assert.equal(await countRecords(t.kv, "flow"), 1);
  await assertNoSecretsInKv(t.kv, secrets, "after /authorize");

  // GitLab answers with a token, the user lookup fails: the flow keeps the GitLab tokens.
  t.upstream.approve();
  secrets.set("GitLab access token", "gl-access-0").set("GitLab refresh token", "gl-refresh-0");
  t.upstream.user = new UpstreamError("transient", "http_502", "upstream answered HTTP 502");
  assert.deepEqual(await json(await poll(t, flowState)), { status: "pending" });
  const kept = await t.store.getFlow(flowState);
  assert.equal(kept?.value.upstreamTokens?.accessToken, "gl-access-0", "the tokens are kept");
  await assertNoSecretsInKv(t.kv, secrets, "with GitLab tokens held in the flow");

  t.upstream.user = { id: 4242, username: "ada" };
  const done = await json(await poll(t, flowState));
  assert.equal(done.status, "complete");
  secrets.set("authorization code", done.code);
  await assertNoSecretsInKv(t.kv, secrets, "after the poll completed");

  const exchanged = await exchange(t, done.code);
  assert.equal(exchanged.status, 200);
  const first = await json(exchanged);
  secrets.set("access token", first.access_token).set("refresh token", first.refresh_token);
  // The JWT's signature alone, too (the header and claims are not secret).
  secrets.set("access token signature", first.access_token.split(".")[2]);
  await assertNoSecretsInKv(t.kv, secrets, "after the code exchange");

  // Refresh once the GitLab token is expiring: GitLab tokens are renewed too.
  const session = await findSessionByRefreshToken(t.store, first.refresh_token);
  t.clock.current = session!.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + 1000;
  const refreshed = await refresh(t, first.refresh_token);
  assert.equal(refreshed.status, 200);
  const second = await json(refreshed);
  assert.deepEqual(t.upstream.refreshTokensSeen, ["gl-refresh-0"]);
  secrets.set("new access token", second.access_token)
    .set("new refresh token", second.refresh_token)
    .set("new GitLab access token", "gl-access-1")
    .set("new GitLab refresh token", "gl-refresh-1");
  await assertNoSecretsInKv(t.kv, secrets, "after the refresh");

  // And what is there is still usable: the session opens with the new GitLab tokens.
  const renewed = await findSessionByRefreshToken(t.store, second.refresh_token);
  assert.deepEqual(await gitlabTokensOf(t.store, renewed), {
    accessToken: "gl-access-1",
    refreshToken: "gl-refresh-1",
  });
  const again = await refresh(t, second.refresh_token);
  assert.equal(again.status, 200);
  await again.body?.cancel();
}

Deno.test("secrets at rest: no secret of a whole sign-in is stored in the clear (keys from JWT_SECRET)", () =>
  withEnv({}, (t) => fullFlowLeavesNoSecrets(t, TEST_SECRET)));

Deno.test("secrets at rest: with ENCRYPTION_KEY set, sessions work and nothing is in the clear", () =>
  withEnv({ ENCRYPTION_KEY }, (t) => fullFlowLeavesNoSecrets(t, TEST_SECRET)));

/** Another instance over the same KV, clock and fake GitLab, configured with `env`. */
async function sibling(t: TestApp, env: Record<string, string>): Promise<FetchHandler> {
  const config = loadConfig({ GITLAB_CLIENT_ID: "gitlab-app-id", BASE_URL: TEST_BASE, ...env });
  return createApp(
    createAppDeps(config, {
      kv: t.kv,
      clock: t.clock,
      logger: silentLogger,
      templates: await loadTemplates(),
      upstream: t.upstream,
    }),
  );
}

async function refreshVia(app: FetchHandler, refreshToken: string) {
  const response = await refresh({ app }, refreshToken);
  return { status: response.status, body: await json(response) };
}

const FAILED_REFRESH = { error: "invalid_grant", error_description: "Invalid refresh token" };

Deno.test("secrets at rest: JWT_SECRET rotated with JWT_SECRET_PREVIOUS → an earlier refresh token still refreshes", () =>
  withEnv({}, async (t) => {
    const tokens = await issueTokens(t);
    const rotated = await sibling(t, {
      JWT_SECRET: NEW_SECRET,
      JWT_SECRET_PREVIOUS: TEST_SECRET,
    });
    // The GitLab token is expiring: the sealed GitLab refresh token must open, too.
    const session = await findSessionByRefreshToken(t.store, tokens.refresh_token);
    t.clock.current = session!.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + 1000;
    const refreshed = await refreshVia(rotated, tokens.refresh_token);
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
    assert.deepEqual(t.upstream.refreshTokensSeen, ["gl-refresh-0"]);

    // The new access token is signed with the new secret only.
    const { payload } = await jwtVerify(
      refreshed.body.access_token,
      new TextEncoder().encode(NEW_SECRET),
      { algorithms: ["HS256"], issuer: TEST_BASE, currentDate: new Date(t.clock.now()) },
    );
    assert.equal(payload.sid, session!.value.id);
    await assert.rejects(
      jwtVerify(refreshed.body.access_token, new TextEncoder().encode(TEST_SECRET), {
        currentDate: new Date(t.clock.now()),
      }),
      { name: "JWSSignatureVerificationFailed" },
    );

    // The session was sealed again under the new secret: it no longer needs the old one.
    const newOnly = await sibling(t, { JWT_SECRET: NEW_SECRET });
    const later = await refreshVia(newOnly, refreshed.body.refresh_token);
    assert.equal(later.status, 200, JSON.stringify(later.body));
  }));

Deno.test("secrets at rest: JWT_SECRET rotated without the previous one → invalid_grant, not 500", () =>
  withEnv({}, async (t) => {
    const tokens = await issueTokens(t);
    const rotated = await sibling(t, { JWT_SECRET: NEW_SECRET });
    assert.deepEqual(await refreshVia(rotated, tokens.refresh_token), {
      status: 400,
      body: FAILED_REFRESH,
    });
    // A flow started before the rotation cannot be completed either, and says so politely.
    const flowState = await startFlow(t);
    t.upstream.approve();
    const response = await rotated(
      new Request(`${TEST_BASE}/oauth/poll?flow_state=${encodeURIComponent(flowState)}`),
    );
    assert.equal(response.status, 400);
    assert.deepEqual(await response.json(), { status: "expired", error: "Flow not found" });
    // Nothing was destroyed: with the previous secret back, the session works again.
    const restored = await sibling(t, {
      JWT_SECRET: NEW_SECRET,
      JWT_SECRET_PREVIOUS: TEST_SECRET,
    });
    assert.equal((await refreshVia(restored, tokens.refresh_token)).status, 200);
  }));

Deno.test("secrets at rest: ENCRYPTION_KEY changed or dropped → invalid_grant, not 500", () =>
  withEnv({ ENCRYPTION_KEY }, async (t) => {
    const tokens = await issueTokens(t);
    const other = await sibling(t, {
      JWT_SECRET: TEST_SECRET,
      ENCRYPTION_KEY: "yet-another-encryption-key-with-32-bytes-or-more",
    });
    assert.deepEqual(await refreshVia(other, tokens.refresh_token), {
      status: 400,
      body: FAILED_REFRESH,
    });
    // Sealed with ENCRYPTION_KEY, not with a key derived from JWT_SECRET.
    const dropped = await sibling(t, { JWT_SECRET: TEST_SECRET });
    assert.deepEqual(await refreshVia(dropped, tokens.refresh_token), {
      status: 400,
      body: FAILED_REFRESH,
    });
    assert.equal((await refreshVia(t.app, tokens.refresh_token)).status, 200);
  }));

Deno.test("secrets at rest: rotation across service restarts on one KV file", async () => {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir({ prefix: "secrets-at-rest-" });
  const kvPath = `${dir}/kv.sqlite`;
  const base = { GITLAB_URL: gitlab.url.href, GITLAB_CLIENT_ID: "rest-app", KV_PATH: kvPath };
  const run = async <T>(env: Record<string, string>, fn: (url: string) => Promise<T>) => {
    const service = await spawnService({ ...base, ...env });
    try {
      return await fn(service.url);
    } finally {
      assert.equal(await service.stop(), 0);
      assert.deepEqual(service.logs.filter((line) => line.includes("unhandled error")), []);
    }
  };
  const refreshAt = (url: string, refreshToken: string) =>
    postToken(url, { grant_type: "refresh_token", refresh_token: refreshToken });
  try {
    // 1. Signed in under the old secret.
    const first = await run({ JWT_SECRET: TEST_SECRET }, (url) => signInOverHttp(url, gitlab));
    // 2. Rotated without the previous secret: refused, cleanly.
    await run({ JWT_SECRET: NEW_SECRET }, async (url) => {
      assert.deepEqual(await refreshAt(url, first.refresh_token), {
        status: 400,
        body: FAILED_REFRESH,
      });
    });
    // 3. Rotated with the previous secret: the old refresh token works.
    const second = await run(
      { JWT_SECRET: NEW_SECRET, JWT_SECRET_PREVIOUS: TEST_SECRET },
      async (url) => {
        const refreshed = await refreshAt(url, first.refresh_token);
        assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
        return refreshed.body;
      },
    );
    // 4. The previous secret retired: the session, sealed again at step 3, lives on.
    await run({ JWT_SECRET: NEW_SECRET }, async (url) => {
      const refreshed = await refreshAt(url, second.refresh_token);
      assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
    });

    const kv = await Deno.openKv(kvPath);
    try {
      const dump = await kvText(kv);
      for (const secret of [TEST_SECRET, NEW_SECRET, first.refresh_token, second.refresh_token]) {
        assert.ok(!dump.includes(secret));
      }
    } finally {
      kv.close();
    }
  } finally {
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});
