/**
 * A real MCP client identified by a Client ID Metadata Document: the MCP TypeScript SDK with
 * `clientMetadataUrl` against the real service (`main.ts` as a child process, gateway mode,
 * REDIRECT_URI_POLICY=registered) and the simulated GitLab. The document is served over https
 * on loopback with a certificate from a test CA the service trusts through `DENO_CERT`, with
 * CLIENT_METADATA_ALLOW_PRIVATE=true (loopback is private). Discovery, no `/register`, sign-in
 * through the page's protocol, tokens bound to the MCP server, then a tool call through the
 * gateway.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/auth"
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { startCallbackServer } from "./_browser.ts";
import { MemoryOAuthProvider, requestLines } from "./_mcp_client.ts";
import { startMcpUpstream, type WhoAmI } from "./_mcp_upstream.ts";
import { followPageWithoutBrowser, spawnWithGitLab } from "./_service.ts";
import { startDocumentServer } from "./_tls.ts";

const DOC_PATH = "/mcp-client/metadata.json";

Deno.test({
  name:
    "cimd sdk: SDK client with clientMetadataUrl → discovery → no /register → sign-in → tokens → tool call",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const docs = await startDocumentServer();
    const callback = startCallbackServer();
    const clientId = `${docs.origin}${DOC_PATH}`;
    docs.route(DOC_PATH, () =>
      Response.json({
        client_id: clientId,
        client_name: "SDK CIMD client",
        redirect_uris: [callback.url],
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: "none",
      }));
    const mcp = startMcpUpstream();
    const { gitlab, service, close } = await spawnWithGitLab("cimd-sdk-app", {
      MCP_UPSTREAM_URL: mcp.url,
      REDIRECT_URI_POLICY: "registered",
      CLIENT_METADATA_ALLOW_PRIVATE: "true",
      DENO_CERT: await docs.caFile(),
    });
    const provider = new MemoryOAuthProvider(callback.url, "CIMD test client", clientId);
    const serverUrl = new URL(`${service.url}/mcp`);
    const client = new Client({ name: "cimd-sdk", version: "1.0.0" });
    try {
      const first = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
      await assert.rejects(
        new Client({ name: "cimd-sdk", version: "1.0.0" }).connect(first),
        UnauthorizedError,
      );
      const authorizationUrl = provider.authorizationUrl;
      assert.ok(authorizationUrl, "the client was sent to sign in");
      assert.equal(authorizationUrl.searchParams.get("client_id"), clientId);
      assert.equal(authorizationUrl.searchParams.get("resource"), serverUrl.href);

      const { callback: returned } = await followPageWithoutBrowser(authorizationUrl, gitlab);
      assert.ok(returned.href.startsWith(callback.url), returned.href);
      assert.ok((docs.hits.get(DOC_PATH) ?? 0) >= 1, "the service fetched the document");
      const code = returned.searchParams.get("code");
      assert.ok(code);
      await first.finishAuth(code);
      const accessToken = provider.tokens()?.access_token;
      assert.ok(accessToken);
      const claims = decodeJwt(accessToken);
      assert.equal(claims.aud, clientId, "aud stays the client id");
      assert.equal(claims.resource, serverUrl.href);

      const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
      await client.connect(transport);
      const result = await client.callTool({ name: "whoami" });
      const [content] = result.content as { type: string; text: string }[];
      const seen: WhoAmI = JSON.parse(content.text);
      assert.match(seen.authorization ?? "", /^Bearer \S+$/);
      assert.notEqual(seen.authorization, `Bearer ${accessToken}`, "our JWT stays with us");

      const requests = requestLines(service.logs);
      assert.ok(!requests.some((line) => line.startsWith("POST /register")), requests.join(", "));
      for (
        const expected of [
          "POST /mcp 401",
          "GET /.well-known/oauth-protected-resource/mcp 200",
          "GET /.well-known/oauth-authorization-server 200",
          "GET /authorize 200",
          "POST /token 200",
          "POST /mcp 200",
        ]
      ) {
        assert.ok(requests.includes(expected), `${expected} in ${requests.join(", ")}`);
      }
    } finally {
      await client.close();
      await close();
      await mcp.close();
      await callback.close();
      await docs.close();
    }
  },
});
