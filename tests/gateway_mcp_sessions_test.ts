/**
 * Gateway mode: MCP sessions. Mcp-Session-Id and MCP-Protocol-Version pass both ways, and each
 * MCP session id is bound (hashed, in KV) to the session that it was handed to: another
 * session's token, a made-up id or an id ended elsewhere never reaches the MCP server.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { VERIFIED_TOKEN_TTL_MS } from "../src/gateway/verified_tokens.ts";
import { recordsOf } from "../src/store/keys.ts";
import { issueTokens, kvText, type TestApp } from "./_helpers.ts";
import { initializeBody, MCP_POST_HEADERS } from "./_mcp_client.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import { gatewayApp, mcpRequest, startScripted } from "./_gateway.ts";

Deno.test("gateway: Mcp-Session-Id and MCP-Protocol-Version pass both ways; DELETE is forwarded", async () => {
  const upstream = startScripted((request) =>
    Response.json(
      {
        method: request.method,
        session: request.headers.get("mcp-session-id"),
        version: request.headers.get("mcp-protocol-version"),
      },
      {
        headers: {
          "Mcp-Session-Id": "session-from-upstream",
          "MCP-Protocol-Version": "2025-06-18",
        },
      },
    )
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const first = await mcpRequest(t, accessToken, { body: "{}" });
    const sessionId = first.headers.get("mcp-session-id");
    assert.equal(sessionId, "session-from-upstream");
    assert.equal(first.headers.get("mcp-protocol-version"), "2025-06-18");
    assert.match(first.headers.get("access-control-expose-headers") ?? "", /Mcp-Session-Id/);
    await first.body?.cancel();
    for (const method of ["POST", "GET", "DELETE"]) {
      const response = await mcpRequest(t, accessToken, {
        method,
        headers: { "Mcp-Session-Id": sessionId!, "MCP-Protocol-Version": "2025-06-18" },
        body: method === "POST" ? "{}" : undefined,
      });
      assert.deepEqual(await response.json(), {
        method,
        session: "session-from-upstream",
        version: "2025-06-18",
      });
    }
  } finally {
    t.close();
    await upstream.close();
  }
});

const INITIALIZE = initializeBody("hijack-test");
const MCP_HEADERS = MCP_POST_HEADERS;

/** A JSON-RPC `tools/list` on an MCP session with `token`. */
function toolsList(t: TestApp, token: string, mcpSessionId: string): Promise<Response> {
  return mcpRequest(t, token, {
    headers: {
      ...MCP_HEADERS,
      "Mcp-Session-Id": mcpSessionId,
      "MCP-Protocol-Version": "2025-06-18",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
  });
}

Deno.test("gateway: an Mcp-Session-Id handed to one session, presented with another session's token → 404, never reaches the MCP server", async () => {
  const upstream = startMcpUpstream();
  const { t, accessToken: alice } = await gatewayApp(upstream.url);
  try {
    const { access_token: mallory } = await issueTokens(t);
    const initialized = await mcpRequest(t, alice, { headers: MCP_HEADERS, body: INITIALIZE });
    assert.equal(initialized.status, 200);
    await initialized.body?.cancel();
    const mcpSessionId = initialized.headers.get("mcp-session-id");
    assert.ok(mcpSessionId);
    assert.deepEqual(upstream.sessionIds, [mcpSessionId]);

    const reached = upstream.requests.length;
    const hijack = await toolsList(t, mallory, mcpSessionId);
    assert.equal(hijack.status, 404, await hijack.clone().text());
    assert.equal((await hijack.json()).error, "invalid_request");
    // A made-up id is no better.
    const madeUp = await toolsList(t, alice, crypto.randomUUID());
    assert.equal(madeUp.status, 404);
    await madeUp.body?.cancel();
    // Without a valid token the answer is the 401 challenge, whatever the session id.
    const anonymous = await toolsList(t, "not-a-token", mcpSessionId);
    assert.equal(anonymous.status, 401);
    await anonymous.body?.cancel();
    assert.equal(upstream.requests.length, reached, "the MCP server saw none of them");

    // Its own session goes on; ending it forgets the binding.
    const own = await toolsList(t, alice, mcpSessionId);
    assert.equal(own.status, 200, await own.clone().text());
    await own.body?.cancel();
    const ended = await mcpRequest(t, alice, {
      method: "DELETE",
      headers: { "Mcp-Session-Id": mcpSessionId, "MCP-Protocol-Version": "2025-06-18" },
    });
    assert.equal(ended.status, 200);
    await ended.body?.cancel();
    assert.equal(await t.store.mcpSessionOwner(mcpSessionId), null);
  } finally {
    t.close();
    await upstream.close();
  }
});

/** Runs `test` on a gateway in front of an MCP server that hands out `mcpSessionId` every time. */
async function withSessionIssuingGateway(
  mcpSessionId: string,
  test: (t: TestApp, accessToken: string) => Promise<void>,
): Promise<void> {
  const upstream = startScripted(() =>
    new Response("{}", { headers: { "Mcp-Session-Id": mcpSessionId } })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    await test(t, accessToken);
  } finally {
    t.close();
    await upstream.close();
  }
}

Deno.test("gateway: the MCP session binding is stored hashed and lives as long as an idle session", () =>
  withSessionIssuingGateway("secret-mcp-session-id", async (t, accessToken) => {
    await (await mcpRequest(t, accessToken, { body: "{}" })).body?.cancel();
    const [binding, ...others] = await recordsOf<{ sessionId: string; expiresAt: number }>(
      t.kv,
      "mcp_session",
    );
    assert.equal(others.length, 0);
    assert.ok(!(await kvText(t.kv)).includes("secret-mcp-session-id"));
    assert.equal(binding.value.sessionId, decodeJwt(accessToken).sid);
    assert.equal(binding.value.expiresAt, t.clock.now() + t.config.sessionIdleTtlSeconds * 1000);
    const sent = await mcpRequest(t, accessToken, {
      headers: { "Mcp-Session-Id": "secret-mcp-session-id" },
      body: "{}",
    });
    assert.equal(sent.status, 200);
    await sent.body?.cancel();
    t.clock.advance(t.config.sessionIdleTtlSeconds * 1000 + 1);
    assert.equal(await t.store.mcpSessionOwner("secret-mcp-session-id"), null);
  }));

Deno.test("gateway: an MCP server handing out a session id bound to another session → 502, the id never reaches the client", () =>
  withSessionIssuingGateway("one-id-for-everyone", async (t, alice) => {
    const { access_token: bob } = await issueTokens(t);
    const first = await mcpRequest(t, alice, { body: "{}" });
    assert.equal(first.headers.get("mcp-session-id"), "one-id-for-everyone");
    await first.body?.cancel();
    const second = await mcpRequest(t, bob, { body: "{}" });
    assert.equal(second.status, 502, await second.clone().text());
    assert.equal((await second.json()).error, "bad_gateway");
    assert.equal(second.headers.get("mcp-session-id"), null);
    assert.equal(await t.store.mcpSessionOwner("one-id-for-everyone"), decodeJwt(alice).sid);
  }));

Deno.test("gateway: a binding ended on another instance is refused here within one second, however busy the session", () =>
  withSessionIssuingGateway("ended-elsewhere", async (t, accessToken) => {
    await (await mcpRequest(t, accessToken, { body: "{}" })).body?.cancel();
    // Another instance served the DELETE: the binding is gone from KV, not from our memory.
    await t.store.unbindMcpSession("ended-elsewhere");
    const statuses: number[] = [];
    for (
      let elapsed = 0;
      elapsed < 3 * VERIFIED_TOKEN_TTL_MS;
      elapsed += VERIFIED_TOKEN_TTL_MS / 4
    ) {
      t.clock.advance(VERIFIED_TOKEN_TTL_MS / 4);
      const response = await mcpRequest(t, accessToken, {
        headers: { "Mcp-Session-Id": "ended-elsewhere" },
        body: "{}",
      });
      await response.body?.cancel();
      statuses.push(response.status);
    }
    // A quarter of the TTL apart, each request could otherwise renew what memory holds.
    assert.deepEqual(statuses.slice(4), Array(statuses.length - 4).fill(404), String(statuses));
  }));
