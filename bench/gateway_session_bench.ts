/**
 * What the MCP session binding costs the gateway's hot path: one POST /mcp through the real app
 * (in process, in-memory KV) to an MCP server on loopback, without `Mcp-Session-Id` and with a
 * bound one (one more key in the session's KV read).
 *
 * deno bench -A bench/gateway_session_bench.ts
 */

import { decodeJwt } from "jose";
import { issueTokens, makeTestApp } from "../tests/_helpers.ts";

/** Stateless without a session id; echoes one, as the MCP SDK's server transport does. */
const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.body?.cancel();
  const headers = new Headers({ "Content-Type": "application/json" });
  const sessionId = request.headers.get("mcp-session-id");
  if (sessionId) headers.set("Mcp-Session-Id", sessionId);
  return new Response('{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}', { headers });
});
const t = await makeTestApp({
  env: { MCP_UPSTREAM_URL: `http://127.0.0.1:${server.addr.port}/mcp`, RATE_LIMIT_MCP: "off" },
});
const { access_token } = await issueTokens(t);

function post(headers: Record<string, string>): Promise<Response> {
  return t.app(
    new Request("http://auth.test/mcp", {
      method: "POST",
      headers: { Authorization: `Bearer ${access_token}`, ...headers },
      body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    }),
  );
}

// What an initialize answer does: bind the MCP session id to the token's session.
await t.store.bindMcpSession(
  "bench-mcp-session",
  String(decodeJwt(access_token).sid),
  t.clock.now() + 3_600_000,
);

Deno.bench("gateway POST /mcp, no Mcp-Session-Id", { baseline: true }, async () => {
  await (await post({})).arrayBuffer();
});

Deno.bench("gateway POST /mcp, bound Mcp-Session-Id", async () => {
  await (await post({ "Mcp-Session-Id": "bench-mcp-session" })).arrayBuffer();
});

globalThis.addEventListener("unload", () => {
  t.close();
  void server.shutdown();
});
