/**
 * Gateway mode: who gets through to the MCP server. Our token's checks (signature, expiry,
 * issuer, algorithm, scope), revocation seen at once or within a second elsewhere, and the
 * answers of a gateway without OAuth settings.
 */

import assert from "node:assert/strict";
import { decodeJwt, SignJWT } from "jose";
import { createApp, type FetchHandler } from "../src/app/app.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { silentLogger } from "../src/logger.ts";
import { VERIFIED_TOKEN_TTL_MS } from "../src/gateway/verified_tokens.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import {
  exchange,
  issueCode,
  issueTokens,
  makeTestApp,
  TEST_BASE,
  TEST_SECRET,
} from "./_helpers.ts";
import {
  assertChallenge,
  echo,
  gatewayApp,
  MCP,
  mcpRequest,
  PRM,
  startScripted,
} from "./_gateway.ts";

const OTHER_SECRET = "another-secret-that-is-at-least-32-bytes!!";
const encoder = new TextEncoder();

/** The access token's claims, re-signed with changes (and another secret or issuer). */
async function resign(
  token: string,
  changes: Record<string, unknown>,
  options: { secret?: string; alg?: string } = {},
): Promise<string> {
  const { iat, exp, ...claims } = decodeJwt(token);
  return await new SignJWT({ ...claims, ...changes })
    .setProtectedHeader({ alg: options.alg ?? "HS256", typ: "JWT" })
    // The token's own issue time: the test clock's, not the wall clock's (the guard refuses a
    // token issued in its future).
    .setIssuedAt(iat)
    .setExpirationTime((changes.exp as number | undefined) ?? exp!)
    .sign(encoder.encode(options.secret ?? TEST_SECRET));
}

function unsecured(token: string): string {
  const header = btoa(JSON.stringify({ alg: "none", typ: "JWT" })).replace(/=+$/, "");
  return `${header}.${token.split(".")[1]}.`;
}

Deno.test("gateway: no Authorization → 401 with a bare resource_metadata challenge", async () => {
  const upstream = startScripted(echo);
  const { t } = await gatewayApp(upstream.url);
  try {
    for (const authorization of [undefined, "Basic dXNlcjpwYXNz"]) {
      const headers: Record<string, string> = authorization ? { Authorization: authorization } : {};
      const response = await t.app(new Request(MCP, { method: "POST", headers, body: "{}" }));
      assert.equal(response.status, 401);
      assert.equal(
        response.headers.get("www-authenticate"),
        `Bearer resource_metadata="${PRM}", scope="mcp:tools mcp:resources"`,
      );
      assert.match(response.headers.get("access-control-expose-headers") ?? "", /WWW-Authenticate/);
      assert.equal((await response.json()).error, undefined, "no error code without a token");
    }
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: the Bearer scheme in any case, after spaces or a tab, is accepted; a scheme with no token is 401 invalid_token", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const accepted = [
      `Bearer ${accessToken}`,
      `bearer ${accessToken}`,
      `BEARER ${accessToken}`,
      `Bearer   ${accessToken}`,
      `Bearer \t${accessToken}`,
    ];
    for (const authorization of accepted) {
      const response = await t.app(
        new Request(MCP, { method: "POST", headers: { Authorization: authorization }, body: "{}" }),
      );
      assert.equal(response.status, 200, authorization.slice(0, 12));
      await response.body?.cancel();
    }
    assert.equal(upstream.requests.length, accepted.length);
    const response = await t.app(
      new Request(MCP, { method: "POST", headers: { Authorization: "Bearer" }, body: "{}" }),
    );
    assert.equal(response.status, 401);
    assertChallenge(response);
    await response.body?.cancel();
    assert.equal(upstream.requests.length, accepted.length);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a token with whitespace inside is 401 invalid_token, and never one more remembered token", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const [header, payload, signature] = accessToken.split(".");
    for (let i = 1; i <= 5; i++) {
      // jose's decoder drops the space: the signature would still verify.
      const variant = `${header}.${payload}.${signature.slice(0, i)} ${signature.slice(i)}`;
      const response = await t.app(
        new Request(MCP, {
          method: "POST",
          headers: { Authorization: `Bearer ${variant}` },
          body: "{}",
        }),
      );
      assert.equal(response.status, 401);
      assert.match(response.headers.get("www-authenticate") ?? "", /error="invalid_token"/);
      await response.body?.cancel();
    }
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a session revoked while its token is being checked is not remembered as accepted", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    // The first check waits in the middle (after reading the session) until the revocation.
    const { promise: revoked, resolve: revocationDone } = Promise.withResolvers<void>();
    const { promise: waiting, resolve: checkWaits } = Promise.withResolvers<void>();
    const open = t.store.openUpstreamTokens.bind(t.store);
    let first = true;
    t.store.openUpstreamTokens = async (session) => {
      if (first) {
        first = false;
        checkWaits();
        await revoked;
      }
      return await open(session);
    };
    const call = () =>
      t.app(
        new Request(MCP, {
          method: "POST",
          headers: { Authorization: `Bearer ${accessToken}` },
          body: "{}",
        }),
      );
    const during = call();
    await waiting;
    const { sid } = decodeJwt(accessToken);
    await t.store.deleteSession(String(sid));
    t.deps.verifiedTokens.forgetSession(String(sid));
    revocationDone();
    await (await during).body?.cancel();
    const after = await call();
    assert.equal(after.status, 401, "refused at once in the process that ended the session");
    await after.body?.cancel();
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: forged, expired, wrong-issuer, alg none and malformed tokens → 401 invalid_token", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const past = Math.floor(t.clock.now() / 1000) - 31;
    const cases: [string, string, RegExp][] = [
      ["forged", await resign(accessToken, {}, { secret: OTHER_SECRET }), /signature/],
      ["expired", await resign(accessToken, { exp: past }), /expired/],
      ["wrong issuer", await resign(accessToken, { iss: "http://evil.test" }), /another server/],
      ["alg none", unsecured(accessToken), /algorithm|malformed/],
      ["HS512", await resign(accessToken, {}, { alg: "HS512" }), /algorithm/],
      ["malformed", "not-a-jwt", /malformed/],
      ["empty", "", /malformed/],
    ];
    for (const [name, token, description] of cases) {
      const response = await mcpRequest(t, token, { body: "{}" });
      assert.equal(response.status, 401, name);
      assertChallenge(response, description);
      assert.equal((await response.json()).error, "invalid_token", name);
    }
    assert.equal(upstream.requests.length, 0, "nothing reached the MCP server");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: expiry has 30 s of leeway, and the previous secret's tokens still count", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url, {
    JWT_SECRET_PREVIOUS: OTHER_SECRET,
  });
  try {
    const justExpired = await resign(accessToken, { exp: Math.floor(t.clock.now() / 1000) - 20 });
    const response = await mcpRequest(t, justExpired, { body: "{}" });
    assert.equal(response.status, 200);
    await response.body?.cancel();

    const oldSecret = await resign(accessToken, {}, { secret: OTHER_SECRET });
    const previous = await mcpRequest(t, oldSecret, { body: "{}" });
    assert.equal(previous.status, 200);
    assert.equal((await previous.json()).authorization, "Bearer gl-access-0");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a token without mcp:tools → 403 insufficient_scope", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const resourcesOnly = await resign(accessToken, { scope: "mcp:resources" });
    const response = await mcpRequest(t, resourcesOnly, { body: "{}" });
    assert.equal(response.status, 403);
    const challenge = response.headers.get("www-authenticate") ?? "";
    assert.match(challenge, /^Bearer error="insufficient_scope", scope="mcp:tools", /);
    assert.ok(challenge.includes(`resource_metadata="${PRM}"`), challenge);
    assert.equal((await response.json()).error, "insufficient_scope");
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: insufficient_scope names only the scopes this call needs and the token lacks", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  const call = (method: string) => JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: {} });
  const scopeOf = (response: Response) =>
    /scope="([^"]*)"/.exec(response.headers.get("www-authenticate") ?? "")?.[1];
  try {
    const toolsOnly = await resign(accessToken, { scope: "mcp:tools" });
    const resourcesOnly = await resign(accessToken, { scope: "mcp:resources" });
    // A read needs mcp:resources alone: a tools-only token is told of that one, not of both.
    const read = await mcpRequest(t, toolsOnly, { body: call("resources/read") });
    assert.equal(read.status, 403);
    assert.equal(scopeOf(read), "mcp:resources");
    await read.body?.cancel();
    const tool = await mcpRequest(t, resourcesOnly, { body: call("tools/call") });
    assert.equal(tool.status, 403);
    assert.equal(scopeOf(tool), "mcp:tools");
    await tool.body?.cancel();
    // Each token passes for the calls its scope covers.
    const allowedRead = await mcpRequest(t, resourcesOnly, { body: call("resources/read") });
    assert.equal(allowedRead.status, 200);
    await allowedRead.body?.cancel();
    const allowedTool = await mcpRequest(t, toolsOnly, { body: call("tools/call") });
    assert.equal(allowedTool.status, 200);
    await allowedTool.body?.cancel();
    assert.equal(upstream.requests.length, 2, "only the allowed calls reached the MCP server");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a session revoked on another instance is refused there within one second", async () => {
  const upstream = startScripted(echo);
  const { t: first, accessToken } = await gatewayApp(upstream.url);
  // A second instance of the service on the same KV, with its own memory of accepted tokens.
  const second = createApp(
    createAppDeps(first.config, {
      kv: first.kv,
      clock: first.clock,
      logger: silentLogger,
      templates: loadTemplates(),
      upstream: first.upstream,
    }),
  );
  const call = async (app: FetchHandler) => {
    const response = await app(
      new Request(MCP, {
        method: "POST",
        headers: { Authorization: `Bearer ${accessToken}` },
        body: "{}",
      }),
    );
    await response.body?.cancel();
    return response.status;
  };
  try {
    assert.equal(await call(second), 200);
    const revoked = await first.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: accessToken }),
      }),
    );
    assert.equal(revoked.status, 200);
    assert.equal(await call(first.app), 401, "at once where it was revoked");
    // The other instance accepted the token a moment ago and remembers it for less than 1 s.
    first.clock.advance(VERIFIED_TOKEN_TTL_MS - 1);
    assert.equal(await call(second), 200);
    first.clock.advance(1);
    assert.equal(await call(second), 401, "within one second everywhere");
    assert.equal(upstream.requests.length, 2);
  } finally {
    first.close();
    await upstream.close();
  }
});

Deno.test("gateway: a token accepted for one host is checked anew for another (no BASE_URL)", async () => {
  const upstream = startScripted(echo);
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: upstream.url, BASE_URL: "" } });
  const { access_token } = await issueTokens(t);
  const call = async (origin: string) => {
    const response = await t.app(
      new Request(`${origin}/mcp`, {
        method: "POST",
        headers: { Authorization: `Bearer ${access_token}` },
        body: "{}",
      }),
    );
    await response.body?.cancel();
    return response.status;
  };
  try {
    assert.equal(await call(TEST_BASE), 200);
    assert.equal(await call("http://another-host.test"), 401, "issued by another server");
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a revoked session is refused at once, though its JWT has not expired", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const before = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(before.status, 200);
    await before.body?.cancel();
    const revoked = await t.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: accessToken }),
      }),
    );
    assert.equal(revoked.status, 200);
    const after = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(after.status, 401);
    assertChallenge(after, /revoked or has expired/);
    await after.body?.cancel();
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a session ended by a replayed code (REVOKE_ON_CODE_REPLAY) is refused at once", async () => {
  const upstream = startScripted(echo);
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: upstream.url, REVOKE_ON_CODE_REPLAY: "true" },
  });
  try {
    const code = await issueCode(t);
    const { access_token: stolen } = await (await exchange(t, code)).json();
    const before = await mcpRequest(t, stolen, { body: "{}" });
    assert.equal(before.status, 200);
    await before.body?.cancel();
    const replay = await exchange(t, code);
    assert.equal(replay.status, 400);
    await replay.body?.cancel();
    const after = await mcpRequest(t, stolen, { body: "{}" });
    assert.equal(after.status, 401, "the token accepted a moment ago is not served from memory");
    await after.body?.cancel();
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: without OAuth settings the MCP path answers 500 like every endpoint", async () => {
  const upstream = startScripted(echo);
  const t = await makeTestApp({ configured: false, env: { MCP_UPSTREAM_URL: upstream.url } });
  try {
    const response = await t.app(new Request(MCP, { method: "POST", body: "{}" }));
    assert.equal(response.status, 500);
    assert.deepEqual(await response.json(), {
      error: "server_error",
      error_description: "OAuth not configured",
    });
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});
