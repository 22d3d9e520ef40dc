/**
 * Issue 22 §1.11: a session holds at most 100 MCP session bindings. A new MCP session beyond
 * that evicts the oldest binding (its id then answers the gateway's 404, the MCP answer for "start
 * a new session"), rather than refusing the new one; and every binding ends with the session.
 */

import assert from "node:assert/strict";
import { VERIFIED_TOKEN_TTL_MS } from "../src/gateway/verified_tokens.ts";
import { MAX_MCP_SESSIONS_PER_SESSION } from "../src/store/mcp_sessions.ts";
import { recordsOf } from "../src/store/keys.ts";
import { issueTokens, makeTestApp, TEST_BASE, type TestApp } from "./_helpers.ts";

function mcp(t: TestApp, token: string, mcpSessionId?: string): Promise<Response> {
  const headers: Record<string, string> = {
    Authorization: `Bearer ${token}`,
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
  };
  if (mcpSessionId) headers["Mcp-Session-Id"] = mcpSessionId;
  return t.app(new Request(`${TEST_BASE}/mcp`, { method: "POST", headers, body: "{}" }));
}

Deno.test("gateway: bindings per session are capped; the oldest goes; all end with the session", async () => {
  let issued = 0;
  const upstream = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    const sent = request.headers.get("mcp-session-id");
    return new Response("{}", {
      headers: { "Mcp-Session-Id": sent ?? `mcp-session-${++issued}` },
    });
  });
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: `http://127.0.0.1:${upstream.addr.port}/mcp` },
  });
  try {
    const { access_token, refresh_token } = await issueTokens(t);
    for (let i = 0; i <= MAX_MCP_SESSIONS_PER_SESSION; i++) {
      const response = await mcp(t, access_token);
      assert.equal(response.status, 200, await response.text());
      t.clock.advance(1);
    }
    assert.equal(issued, MAX_MCP_SESSIONS_PER_SESSION + 1);
    assert.equal((await recordsOf(t.kv, "mcp_session")).length, MAX_MCP_SESSIONS_PER_SESSION);

    // The gateway remembers accepted bindings for a second (verified_tokens.ts); past that:
    t.clock.advance(VERIFIED_TOKEN_TTL_MS + 1);
    const oldest = await mcp(t, access_token, "mcp-session-1");
    assert.equal(oldest.status, 404, "the oldest binding was evicted");
    await oldest.body?.cancel();
    for (const kept of ["mcp-session-2", `mcp-session-${issued}`]) {
      const response = await mcp(t, access_token, kept);
      assert.equal(response.status, 200, kept);
      await response.body?.cancel();
    }

    const revoked = await t.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: refresh_token }),
      }),
    );
    assert.equal(revoked.status, 200);
    assert.equal((await recordsOf(t.kv, "mcp_session")).length, 0, "bindings end with it");
    assert.equal((await recordsOf(t.kv, "mcp_session_of")).length, 0, "and their index");
  } finally {
    t.close();
    await upstream.shutdown();
  }
});
