/**
 * An `https:` MCP_UPSTREAM_URL: the gateway reaches it with the runtime's TLS (its certificate
 * checked against the roots `DENO_CERT` adds), never with an unchecked certificate.
 */

import assert from "node:assert/strict";
import { postMcpOverHttp, signInOverHttp, spawnWithGitLab } from "./_service.ts";
import { type DocumentServer, startDocumentServer } from "./_tls.ts";

async function callOverHttps(
  mcp: DocumentServer,
  env: Record<string, string>,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const { gitlab, service, close } = await spawnWithGitLab("https-mcp-app", {
    MCP_UPSTREAM_URL: `${mcp.origin}/mcp`,
    ...env,
  });
  try {
    const { access_token } = await signInOverHttp(service.url, gitlab);
    return await postMcpOverHttp(service.url, access_token, { method: "tools/list" });
  } finally {
    await close();
  }
}

Deno.test("gateway: an https MCP server with a certificate DENO_CERT trusts is reached", async () => {
  const mcp = await startDocumentServer();
  const seen: (string | null)[] = [];
  mcp.route("/mcp", (request) => {
    seen.push(request.headers.get("authorization"));
    return Response.json({ jsonrpc: "2.0", id: 1, result: { tools: [] } });
  });
  try {
    const answer = await callOverHttps(mcp, { DENO_CERT: await mcp.caFile() });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.deepEqual(answer.body.result, { tools: [] });
    // The user's GitLab token crossed, over TLS; never ours.
    assert.equal(seen.length, 1);
    assert.match(seen[0] ?? "", /^Bearer \S+$/);
  } finally {
    await mcp.close();
  }
});

Deno.test("gateway: an https MCP server whose certificate nobody trusts gets nothing: 502", async () => {
  const mcp = await startDocumentServer();
  mcp.route("/mcp", () => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  try {
    const answer = await callOverHttps(mcp, {});
    assert.equal(answer.status, 502, JSON.stringify(answer.body));
    assert.equal(answer.body.error, "bad_gateway");
    assert.equal(mcp.hits.get("/mcp") ?? 0, 0);
  } finally {
    await mcp.close();
  }
});
