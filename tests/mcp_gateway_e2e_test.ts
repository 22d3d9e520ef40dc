/**
 * End to end with real MCP components: an MCP SDK client with an OAuth provider connects to the
 * service's `/mcp` (a child process in gateway mode), is refused with 401, discovers, registers
 * and signs in through the device page in Chromium against the simulated GitLab, and then
 * calls a tool on an MCP SDK server behind the gateway, which sees the user's GitLab token and
 * never ours. Skips with a printed reason when Chromium is absent, never under CI.
 */

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/auth"
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ignoreBrowserTests, launchBrowser, startCallbackServer } from "./_browser.ts";
import { assertMcpSignInRequests, MemoryOAuthProvider } from "./_mcp_client.ts";
import { startMcpUpstream, type WhoAmI } from "./_mcp_upstream.ts";
import { spawnWithGitLab } from "./_service.ts";

Deno.test({
  name: "mcp e2e: SDK client → 401 → discovery → registration → device sign-in → tool call",
  ignore: ignoreBrowserTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const browser = await launchBrowser();
    const mcp = startMcpUpstream();
    // The MCP client's redirect target on loopback.
    const callback = startCallbackServer();
    const { gitlab, service, close } = await spawnWithGitLab("gateway-e2e-app", {
      MCP_UPSTREAM_URL: mcp.url,
    });
    const provider = new MemoryOAuthProvider(callback.url, "gateway e2e client");
    const serverUrl = new URL(`${service.url}/mcp`);
    const client = new Client({ name: "gateway-e2e", version: "1.0.0" });
    try {
      const first = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
      await assert.rejects(
        new Client({ name: "gateway-e2e", version: "1.0.0" }).connect(first),
        UnauthorizedError,
      );
      assert.ok(provider.authorizationUrl, "the client was sent to sign in");
      assert.equal(provider.authorizationUrl.origin, service.url);
      assert.equal(mcp.requests.length, 0, "nothing reached the MCP server unauthenticated");

      const page = await browser.newPage();
      await page.goto(provider.authorizationUrl.href);
      assert.equal((await page.textContent("#user-code"))?.trim(), gitlab.lastUserCode());
      gitlab.approve(gitlab.lastUserCode()!);
      // The page polls 5 s after load, then redirects to the client.
      await page.waitForURL((url) => url.href.startsWith(callback.url), { timeout: 20_000 });
      const code = new URL(page.url()).searchParams.get("code");
      assert.ok(code);
      await first.finishAuth(code);
      const accessToken = provider.tokens()?.access_token;
      assert.ok(accessToken);

      const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
      await client.connect(transport);
      assert.equal(transport.sessionId, mcp.sessionIds[0], "Mcp-Session-Id came through");
      const result = await client.callTool({ name: "whoami" });
      const [content] = result.content as { type: string; text: string }[];
      const seen: WhoAmI = JSON.parse(content.text);

      assert.match(seen.authorization ?? "", /^Bearer \S+$/);
      const gitlabToken = seen.authorization!.slice("Bearer ".length);
      assert.notEqual(gitlabToken, accessToken);
      const user = await fetch(new URL("/api/v4/user", gitlab.url), {
        headers: { Authorization: `Bearer ${gitlabToken}` },
      });
      assert.equal(user.status, 200, "the MCP server got a token GitLab accepts");
      assert.equal((await user.json()).username, "ada");
      assert.equal(seen.mcpSessionId, transport.sessionId);
      for (const { headers } of mcp.requests) {
        for (const [, value] of headers) {
          assert.ok(!value.includes(accessToken), "our JWT never reached the MCP server");
        }
      }
      assert.ok(service.logs.every((line) => !line.includes(gitlabToken)), "no token in logs");
      assertMcpSignInRequests(service.logs);
    } finally {
      await client.close();
      await browser.close();
      await close();
      await mcp.close();
      await callback.close();
    }
  },
});
