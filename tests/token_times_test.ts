/**
 * Issue 22 §1.14: the gateway and the library guard refuse an access token whose `iat` lies more
 * than a minute ahead, or whose `exp` lies further ahead than the issued lifetime plus a minute.
 * Such a token was never made by this service's token endpoint (a leaked secret, a forger).
 */

import { testGuard } from "./_guard.ts";
import assert from "node:assert/strict";
import { decodeJwt, SignJWT } from "jose";
import { createResourceGuard } from "../mod.ts";
import { issueTokens, makeTestApp, TEST_BASE, TEST_SECRET, type TestApp } from "./_helpers.ts";
import { mcpPostInit } from "./_service.ts";

const encoder = new TextEncoder();

/** The token's claims signed again with the given `iat` and `exp` (seconds). */
function resignAt(token: string, iat: number, exp: number): Promise<string> {
  const { iat: _iat, exp: _exp, ...claims } = decodeJwt(token);
  return new SignJWT({ ...claims, iat, exp })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .sign(encoder.encode(TEST_SECRET));
}

function startUpstream() {
  return Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json({ jsonrpc: "2.0", id: 1, result: {} }),
  );
}

async function mcpStatus(t: TestApp, token: string): Promise<[number, string]> {
  const response = await t.app(
    new Request(`${TEST_BASE}/mcp`, mcpPostInit(token)),
  );
  await response.body?.cancel();
  return [response.status, response.headers.get("www-authenticate") ?? ""];
}

Deno.test("gateway and guard: future iat and far-future exp are refused, fresh tokens pass", async () => {
  const upstream = startUpstream();
  const t = await makeTestApp({
    env: {
      MCP_UPSTREAM_URL: `http://127.0.0.1:${upstream.addr.port}/mcp`,
      ACCESS_TOKEN_TTL: "600",
    },
  });
  try {
    const { access_token } = await issueTokens(t);
    const now = Math.floor(t.clock.now() / 1000);
    const guard = testGuard(t, { accessTokenTtlSeconds: 600 });
    const cases: [string, number, number, boolean][] = [
      ["as issued", now, now + 600, true],
      ["iat 60 s ahead (leeway)", now + 60, now + 600, true],
      ["exp at lifetime + 60 s (leeway)", now, now + 660, true],
      ["iat 120 s ahead", now + 120, now + 600, false],
      ["iat a day ahead", now + 86_400, now + 86_400 + 600, false],
      ["exp a year ahead", now, now + 365 * 86_400, false],
      ["exp at lifetime + 61 s", now, now + 661, false],
    ];
    for (const [name, iat, exp, accepted] of cases) {
      const token = await resignAt(access_token, iat, exp);
      const [status, challenge] = await mcpStatus(t, token);
      if (accepted) assert.equal(status, 200, `gateway, ${name}`);
      else {
        assert.equal(status, 401, `gateway, ${name}`);
        assert.match(challenge, /invalid_token/, name);
      }
      const result = await guard.authenticate(
        new Request(`${TEST_BASE}/mcp`, { headers: { Authorization: `Bearer ${token}` } }),
      );
      assert.equal(!(result instanceof Response), accepted, `guard, ${name}`);
      if (result instanceof Response) assert.equal(result.status, 401, name);
    }
  } finally {
    t.close();
    await upstream.shutdown();
  }
});

Deno.test("guard: accessTokenTtlSeconds must be positive", () => {
  assert.throws(
    () =>
      createResourceGuard({
        kv: {} as Deno.Kv,
        jwtSecret: TEST_SECRET,
        issuer: TEST_BASE,
        upstream: {} as never,
        accessTokenTtlSeconds: 0,
      }),
    /accessTokenTtlSeconds must be positive/,
  );
});
