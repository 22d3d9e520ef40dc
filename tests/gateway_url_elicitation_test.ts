/**
 * MCP 2026-07-28 moved URL elicitation to the input-required pattern: the gateway never
 * originates `-32042` (URLElicitationRequired) on any revision, and an MCP server's `-32042`
 * (its own business on the revisions that have it) is relayed as it came (issue 33 §3.3). With
 * the SDK v2 client pinned to 2026-07-28, what the gateway refuses reaches the client with the
 * gateway's own codes.
 */

import assert from "node:assert/strict";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { modernBody, postToGateway, startGateway, startScripted } from "./_gateway_mcp.ts";
import { NOTE_URI, startMcpV2Upstream } from "./_mcp_v2_upstream.ts";

const URL_ELICITATION_REQUIRED = -32042;

Deno.test("2026-07-28 through the gateway: refusals reach the SDK v2 client with the gateway's codes, never -32042", async () => {
  const upstream = startMcpV2Upstream();
  const policy = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(
    policy,
    JSON.stringify({ rules: [{ resources: ["note://*"], deny: { users: ["ada"] } }] }),
  );
  const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: policy } });
  const client = new Client(
    { name: "url-elicitation-test", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  try {
    await client.connect(
      new StreamableHTTPClientTransport(new URL(g.mcpUrl), {
        authProvider: { token: () => Promise.resolve(g.accessToken) },
      }),
    );
    const refused = await client.readResource({ uri: NOTE_URI }).catch((error) => error);
    assert.equal(refused.code, -32403, String(refused));
    const spelled = await client.readResource({ uri: "NOTE://greeting" }).catch((error) => error);
    assert.equal(spelled.code, -32602, String(spelled));
  } finally {
    await client.close();
    await g.close();
    await upstream.close();
    await Deno.remove(policy);
  }
});

Deno.test("the gateway relays an MCP server's -32042 as it came", async () => {
  const answer = JSON.stringify({
    jsonrpc: "2.0",
    id: 1,
    error: {
      code: URL_ELICITATION_REQUIRED,
      message: "Open the consent page first",
      data: {
        elicitations: [{ mode: "url", url: "https://mcp.example/consent", elicitationId: "e1" }],
      },
    },
  });
  const upstream = startScripted(async (request) => {
    await request.body?.cancel();
    return new Response(answer, { headers: { "Content-Type": "application/json" } });
  });
  const g = await startGateway(upstream.url);
  try {
    const response = await postToGateway(
      g,
      JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "x" } }),
      { "MCP-Protocol-Version": "2025-11-25" },
    );
    assert.equal(response.status, 200);
    assert.equal(await response.text(), answer);
    // A 2026-07-28 request is relayed the same way: the gateway adds nothing of its own.
    const modern = await postToGateway(
      g,
      modernBody(1, "tools/call", { name: "x", arguments: {} }),
      {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "x",
      },
    );
    assert.equal(await modern.text(), answer);
  } finally {
    await g.close();
    await upstream.close();
  }
});
