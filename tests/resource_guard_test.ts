/**
 * The library guard (`mod.ts`) next to the service: same KV, same sessions, same refresh lock,
 * and the same answers as the gateway.
 */

import { testGuard } from "./_guard.ts";
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { createResourceGuard, type ResourceGuardOptions, UpstreamError } from "../mod.ts";
import { createLogger } from "../src/logger.ts";
import type { AccessTokenClaims } from "../src/jwt.ts";
import { CLOCK_TOLERANCE_SECONDS } from "../src/gateway/guard.ts";
import {
  FakeUpstream,
  issueTokens,
  makeTestApp,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";

const RESOURCE = "https://mcp.example.com/mcp";
const PRM = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";
/** The service protects the MCP server the guard guards: its tokens are bound to it. */
const PROTECTS_RESOURCE = { MCP_RESOURCE_URL: RESOURCE };

function guardFor(t: TestApp, options: Partial<ResourceGuardOptions> = {}) {
  return testGuard(t, { resource: RESOURCE, ...options });
}

function withToken(token: string | undefined): Request {
  const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
  return new Request(RESOURCE, { method: "POST", headers, body: "{}" });
}

async function setGitLabExpiry(t: TestApp, accessToken: string, expiry: number): Promise<void> {
  const session = await t.store.getSession(decodeJwt(accessToken).sid as string);
  assert.ok(session);
  assert.ok(await t.store.saveSession(session, { ...session.value, upstreamTokenExpiry: expiry }));
}

Deno.test("guard: reads the service's sessions and answers who the request acts for", async () => {
  const t = await makeTestApp({ env: PROTECTS_RESOURCE });
  try {
    const { access_token } = await issueTokens(t);
    const result = await guardFor(t).authenticate(withToken(access_token));
    assert.ok(!(result instanceof Response));
    assert.deepEqual(result, {
      user: { id: "4242", username: "ada" },
      scopes: ["mcp:tools", "mcp:resources"],
      clientId: "client-1",
      sessionId: decodeJwt(access_token).sid,
      gitlabToken: "gl-access-0",
    });
  } finally {
    t.close();
  }
});

Deno.test("guard: with ENCRYPTION_KEY it opens what the service sealed", async () => {
  const encryptionKey = "encryption-key-that-is-at-least-32-bytes-long";
  const t = await makeTestApp({ env: { ...PROTECTS_RESOURCE, ENCRYPTION_KEY: encryptionKey } });
  try {
    const { access_token } = await issueTokens(t);
    const result = await guardFor(t, { encryptionKey }).authenticate(withToken(access_token));
    assert.ok(!(result instanceof Response));
    assert.equal(result.gitlabToken, "gl-access-0");
  } finally {
    t.close();
  }
});

Deno.test("guard: during a rotation, encryptionKeyPrevious opens what the service sealed with the old key", async () => {
  const old = "encryption-key-that-is-at-least-32-bytes-long";
  const t = await makeTestApp({ env: { ...PROTECTS_RESOURCE, ENCRYPTION_KEY: old } });
  try {
    const { access_token } = await issueTokens(t);
    const encryptionKey = "the-new-encryption-key-at-least-32-bytes-long";
    const rotated = guardFor(t, { encryptionKey, encryptionKeyPrevious: old });
    const result = await rotated.authenticate(withToken(access_token));
    assert.ok(!(result instanceof Response));
    assert.equal(result.gitlabToken, "gl-access-0");
    const newOnly = await guardFor(t, { encryptionKey }).authenticate(withToken(access_token));
    assert.ok(newOnly instanceof Response, "the old key's session is gone without it");
    await newOnly.body?.cancel();
  } finally {
    t.close();
  }
});

Deno.test("guard: failures are ready responses pointing at the resource's metadata", async () => {
  const t = await makeTestApp({ env: PROTECTS_RESOURCE });
  try {
    const { access_token } = await issueTokens(t);
    const guard = guardFor(t);

    const anonymous = await guard.authenticate(withToken(undefined));
    assert.ok(anonymous instanceof Response);
    assert.equal(anonymous.status, 401);
    assert.equal(
      anonymous.headers.get("www-authenticate"),
      `Bearer resource_metadata="${PRM}", scope="mcp:tools mcp:resources"`,
    );

    const wrongIssuer = await guardFor(t, { issuer: "https://other.example" })
      .authenticate(withToken(access_token));
    assert.ok(wrongIssuer instanceof Response);
    assert.equal(wrongIssuer.status, 401);
    assert.equal(
      wrongIssuer.headers.get("www-authenticate"),
      `Bearer error="invalid_token", error_description="The access token was issued by another server", resource_metadata="${PRM}", scope="mcp:tools mcp:resources"`,
    );
    assert.deepEqual(await wrongIssuer.json(), {
      error: "invalid_token",
      error_description: "The access token was issued by another server",
    });

    const needsAdmin = await guardFor(t, { requiredScope: "admin" })
      .authenticate(withToken(access_token));
    assert.ok(needsAdmin instanceof Response);
    assert.equal(needsAdmin.status, 403);
    assert.match(needsAdmin.headers.get("www-authenticate") ?? "", /scope="admin"/);

    t.clock.advance(3600_000 + (CLOCK_TOLERANCE_SECONDS + 1) * 1000);
    const expired = await guard.authenticate(withToken(access_token));
    assert.ok(expired instanceof Response);
    assert.equal(expired.status, 401);
    assert.match(expired.headers.get("www-authenticate") ?? "", /expired/);
  } finally {
    t.close();
  }
});

Deno.test("guard: GitLab failing with the token already expired → 503 with Retry-After", async () => {
  const t = await makeTestApp({ env: PROTECTS_RESOURCE });
  try {
    const { access_token } = await issueTokens(t);
    await setGitLabExpiry(t, access_token, t.clock.now() - 1);
    t.upstream.refreshes.push(new UpstreamError("transient", "http_502"));
    const result = await guardFor(t).authenticate(withToken(access_token));
    assert.ok(result instanceof Response);
    assert.equal(result.status, 503);
    assert.equal(result.headers.get("retry-after"), "5");
    assert.equal((await result.json()).error, "temporarily_unavailable");
  } finally {
    t.close();
  }
});

Deno.test("guard: tokens never reach a log line", async () => {
  const lines: string[] = [];
  const t = await makeTestApp({ env: PROTECTS_RESOURCE });
  try {
    const { access_token } = await issueTokens(t);
    await setGitLabExpiry(t, access_token, t.clock.now() + 60_000);
    t.upstream.refreshes.push(new UpstreamError("terminal", "invalid_grant"));
    const guard = guardFor(t, { logger: createLogger((line) => lines.push(line)) });
    const result = await guard.authenticate(withToken(access_token));
    assert.ok(result instanceof Response);
    assert.equal(result.status, 401);
    assert.equal(lines.length, 2, "the failed refresh and the session it ended are logged");
    for (const line of lines) {
      for (const secret of ["gl-access-0", "gl-refresh-0", access_token]) {
        assert.ok(!line.includes(secret), line);
      }
    }
  } finally {
    t.close();
  }
});

Deno.test("guard: guard and gateway on one KV refresh a session's GitLab token once", async () => {
  const mcp = startMcpUpstream();
  const t = await makeTestApp({ env: { ...PROTECTS_RESOURCE, MCP_UPSTREAM_URL: mcp.url } });
  try {
    const { access_token } = await issueTokens(t);
    await setGitLabExpiry(t, access_token, t.clock.now() + 60_000);
    const slowRefresh = async () => {
      await new Promise((resolve) => setTimeout(resolve, 100));
      return {
        accessToken: "gl-access-new",
        refreshToken: "gl-refresh-new",
        expiresInSeconds: 7200,
      };
    };
    t.upstream.refreshes.push(slowRefresh);
    // The guard's own GitLab client: only the shared lease can keep the two apart.
    const guardUpstream = new FakeUpstream();
    guardUpstream.refreshes.push(slowRefresh);
    const guard = guardFor(t, { upstream: guardUpstream });

    const viaGuard = Array.from({ length: 10 }, () => guard.authenticate(withToken(access_token)));
    const viaGateway = Array.from({ length: 10 }, () =>
      t.app(
        new Request(`${TEST_BASE}/mcp`, {
          method: "GET",
          headers: { Authorization: `Bearer ${access_token}`, Accept: "text/event-stream" },
        }),
      ));
    for (const result of await Promise.all(viaGuard)) {
      assert.ok(!(result instanceof Response));
      assert.equal(result.gitlabToken, "gl-access-new");
    }
    for (const response of await Promise.all(viaGateway)) {
      assert.notEqual(response.status, 401);
      await response.body?.cancel();
    }
    assert.equal(t.upstream.calls.refresh + guardUpstream.calls.refresh, 1);
    const gitlabTokens = mcp.requests.map(({ headers }) => headers.get("authorization"));
    assert.deepEqual(new Set(gitlabTokens), new Set(["Bearer gl-access-new"]));
  } finally {
    t.close();
    await mcp.close();
  }
});

Deno.test("guard: with GitLab settings it refreshes at GitLab itself", async () => {
  const gitlab = startSimulatedGitLab();
  const t = await makeTestApp({ env: PROTECTS_RESOURCE });
  try {
    const issued = gitlab.issueTokens();
    t.upstream.approve({ accessToken: issued.accessToken, refreshToken: issued.refreshToken });
    const { access_token } = await issueTokens(t);
    await setGitLabExpiry(t, access_token, t.clock.now() + 60_000);
    const guard = guardFor(t, {
      upstream: undefined,
      gitlab: { url: gitlab.url, clientId: "guard-app" },
    });
    const result = await guard.authenticate(withToken(access_token));
    assert.ok(!(result instanceof Response));
    assert.equal(gitlab.calls.refresh, 1);
    assert.notEqual(result.gitlabToken, issued.accessToken);
    const user = await fetch(new URL("/api/v4/user", gitlab.url), {
      headers: { Authorization: `Bearer ${result.gitlabToken}` },
    });
    assert.equal((await user.json()).username, "ada");
  } finally {
    t.close();
    await gitlab.close();
  }
});

Deno.test("guard: a token naming no resource is good at {issuer}/mcp only, as at the gateway", async () => {
  const t = await makeTestApp();
  try {
    const { access_token } = await issueTokens(t);
    const { resource: _dropped, iat: _iat, exp: _exp, ...claims } = decodeJwt(access_token);
    // As a build from before resource indicators signed: for the service's /mcp.
    const unbound = await t.deps.oauth!.signer.sign(
      claims as unknown as AccessTokenClaims,
      t.clock.now(),
      t.config.accessTokenTtlSeconds,
    );
    const atMcp = await testGuard(t).authenticate(withToken(unbound));
    assert.ok(!(atMcp instanceof Response), "good at the default resource, {issuer}/mcp");
    for (const resource of [`${TEST_BASE}/mcp/docs`, RESOURCE]) {
      const elsewhere = await testGuard(t, { resource }).authenticate(withToken(unbound));
      assert.ok(elsewhere instanceof Response, `refused at ${resource}`);
      assert.equal(elsewhere.status, 401);
      assert.equal((await elsewhere.json()).error, "invalid_token");
    }
  } finally {
    t.close();
  }
});

Deno.test("guard: unusable options throw TypeError at once", () => {
  const kv = {} as Deno.Kv; // never touched: construction fails first
  const base = { kv, jwtSecret: TEST_SECRET, issuer: TEST_BASE, upstream: new FakeUpstream() };
  assert.throws(() => createResourceGuard({ ...base, jwtSecret: "short" }), TypeError);
  assert.throws(() => createResourceGuard({ ...base, jwtSecretPrevious: "short" }), TypeError);
  assert.throws(() => createResourceGuard({ ...base, issuer: "not a url" }), TypeError);
  assert.throws(() => createResourceGuard({ ...base, upstream: undefined }), TypeError);
});
