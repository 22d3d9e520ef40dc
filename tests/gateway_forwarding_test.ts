/**
 * Gateway mode: what the MCP server gets in place of our token. The user's GitLab token (as
 * Authorization or PRIVATE-TOKEN), refreshed once however many calls need it, the MCP server's
 * own refusal of it, and the path the gateway answers on.
 */

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { decodeJwt } from "jose";
import { VERIFIED_TOKEN_TTL_MS } from "../src/gateway/verified_tokens.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { makeTestApp, TEST_BASE, type TestApp } from "./_helpers.ts";
import { inProcessFetch, startMcpUpstream, type WhoAmI } from "./_mcp_upstream.ts";
import { assertChallenge, echo, gatewayApp, MCP, mcpRequest, startScripted } from "./_gateway.ts";

/** Makes the session's GitLab token expire within the refresh buffer. */
async function expireGitLabTokenSoon(t: TestApp, accessToken: string): Promise<void> {
  const session = await t.store.getSession(decodeJwt(accessToken).sid as string);
  assert.ok(session);
  const saved = await t.store.saveSession(session, {
    ...session.value,
    upstreamTokenExpiry: t.clock.now() + 60_000,
  });
  assert.ok(saved);
  // A token accepted a moment ago is remembered that long, as the session was then.
  t.clock.advance(VERIFIED_TOKEN_TTL_MS);
}

Deno.test("gateway: forwards with the GitLab token in place of ours, body kept, query dropped (issue 21)", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await t.app(
      new Request(`${MCP}?probe=1`, {
        method: "POST",
        headers: { Authorization: `Bearer ${accessToken}`, "Content-Type": "application/json" },
        body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      }),
    );
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual(await response.json(), {
      authorization: "Bearer gl-access-0",
      privateToken: null,
      body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      search: "",
    });
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: MCP_UPSTREAM_TOKEN_HEADER=private-token sends PRIVATE-TOKEN, no Authorization", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url, {
    MCP_UPSTREAM_TOKEN_HEADER: "private-token",
  });
  try {
    const response = await mcpRequest(t, accessToken, {
      // A client-sent PRIVATE-TOKEN never reaches the MCP server either.
      headers: { "PRIVATE-TOKEN": "client-chosen" },
      body: "{}",
    });
    const body = await response.json();
    assert.equal(body.authorization, null);
    assert.equal(body.privateToken, "gl-access-0");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: the MCP server's own 401 challenge is replaced by ours", async () => {
  const upstream = startScripted(() =>
    new Response("no", {
      status: 401,
      headers: {
        "WWW-Authenticate":
          'Bearer resource_metadata="https://gitlab.example/.well-known/oauth-protected-resource", scope="mcp:tools mcp:resources"',
      },
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(response.status, 401);
    assertChallenge(response, /refused the GitLab token/);
    await response.body?.cancel();
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: routing follows the resource URL's path; off without MCP_UPSTREAM_URL", async () => {
  const upstream = startScripted(echo);
  const plain = await makeTestApp();
  const { t, accessToken } = await gatewayApp(upstream.url, {
    MCP_RESOURCE_URL: "https://mcp.example.com/tools/mcp",
  });
  try {
    const off = await plain.app(new Request(MCP, { method: "POST", body: "{}" }));
    assert.equal(off.status, 404);
    await off.body?.cancel();

    const elsewhere = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(elsewhere.status, 404);
    await elsewhere.body?.cancel();
    const response = await t.app(
      new Request(`${TEST_BASE}/tools/mcp`, {
        method: "POST",
        headers: { Authorization: `Bearer ${accessToken}` },
        body: "{}",
      }),
    );
    assert.equal(response.status, 200);
    assert.equal((await response.json()).authorization, "Bearer gl-access-0");
    const anonymous = await t.app(new Request(`${TEST_BASE}/tools/mcp`, { method: "POST" }));
    assert.equal(
      anonymous.headers.get("www-authenticate"),
      'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/tools/mcp", scope="mcp:tools mcp:resources"',
    );
    await anonymous.body?.cancel();
  } finally {
    plain.close();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: GitLab refusing the refresh → 401; failing with the token still valid → served", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    await expireGitLabTokenSoon(t, accessToken);
    t.upstream.refreshes.push(new UpstreamError("transient", "timeout"));
    const stillValid = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(stillValid.status, 200);
    assert.equal((await stillValid.json()).authorization, "Bearer gl-access-0");

    t.upstream.refreshes.push(new UpstreamError("terminal", "invalid_grant"));
    const refused = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(refused.status, 401);
    assertChallenge(refused, /sign in again/);
    await refused.body?.cancel();
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: 20 parallel tool calls over the MCP SDK with an expiring GitLab token → one refresh", async () => {
  const upstream = startMcpUpstream();
  const { t, accessToken } = await gatewayApp(upstream.url);
  const client = new Client({ name: "gateway-test", version: "1.0.0" });
  try {
    const transport = new StreamableHTTPClientTransport(new URL(MCP), {
      fetch: inProcessFetch(t.app),
      requestInit: { headers: { Authorization: `Bearer ${accessToken}` } },
    });
    await client.connect(transport);
    assert.equal(transport.sessionId, upstream.sessionIds[0], "Mcp-Session-Id round-trips");

    await expireGitLabTokenSoon(t, accessToken);
    t.upstream.refreshes.push(async () => {
      await new Promise((resolve) => setTimeout(resolve, 100));
      return {
        accessToken: "gl-access-new",
        refreshToken: "gl-refresh-new",
        expiresInSeconds: 7200,
      };
    });
    const results = await Promise.all(
      Array.from({ length: 20 }, () => client.callTool({ name: "whoami" })),
    );
    assert.equal(t.upstream.calls.refresh, 1);
    assert.deepEqual(t.upstream.refreshTokensSeen, ["gl-refresh-0"]);
    for (const result of results) {
      const [content] = result.content as { type: string; text: string }[];
      const seen: WhoAmI = JSON.parse(content.text);
      assert.equal(seen.authorization, "Bearer gl-access-new");
      assert.equal(seen.mcpSessionId, transport.sessionId);
    }
    for (const { headers } of upstream.requests) {
      assert.ok(!headers.get("authorization")?.includes(accessToken), "our JWT never forwarded");
    }
  } finally {
    await client.close();
    t.close();
    await upstream.close();
  }
});
