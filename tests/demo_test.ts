/**
 * `deno task demo` is a whole MCP setup: the demo (dev/demo.ts, a child process on a random
 * port) driven by the MCP SDK client as an MCP host would: 401 at `/mcp` → discovery →
 * registration → sign-in at the demo's simulated GitLab (approved over HTTP, as a person on its
 * page) → tools on the demo's MCP server answer as the simulated user.
 */

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/auth"
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
} from "@modelcontextprotocol/client";
import { createExampleMcpServer } from "../deploy/example_mcp_server.ts";
import { HANDBOOK_URI } from "../dev/demo_docs_server.ts";
import { startDemoMcpServer } from "../dev/demo_mcp_server.ts";
import { assertMcpSignInRequests, MemoryOAuthProvider } from "./_mcp_client.ts";
import {
  demoRunArgs,
  followPageWithoutBrowser,
  mcpPostInit,
  redirectSignInWithoutBrowser,
  spawnService,
  waitFor,
} from "./_service.ts";

/** The text of a tool's first content item. */
function textOf(result: Awaited<ReturnType<Client["callTool"]>>): string {
  const [content] = result.content as { type: string; text: string }[];
  return content.text;
}

Deno.test({
  name: "demo: MCP SDK client → 401 → discovery → registration → sign-in → whoami is the user",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const demo = await spawnService({ PORT: "0" }, demoRunArgs());
    const client = new Client({ name: "demo-test", version: "1.0.0" });
    try {
      const gitlabUrl = new URL(demo.listening.gitlab);
      const serverUrl = new URL(`${demo.url}/mcp`);
      // An MCP host's loopback redirect; the test follows it itself, so nothing listens there.
      const provider = new MemoryOAuthProvider("http://127.0.0.1:9/callback", "demo test client");

      const first = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
      await assert.rejects(
        new Client({ name: "demo-test", version: "1.0.0" }).connect(first),
        UnauthorizedError,
      );
      assert.ok(provider.authorizationUrl, "the client was sent to sign in");
      assert.equal(provider.authorizationUrl.origin, demo.url);

      const { callback } = await followPageWithoutBrowser(provider.authorizationUrl, gitlabUrl);
      const code = callback.searchParams.get("code");
      assert.ok(code);
      await first.finishAuth(code);

      await client.connect(
        new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }),
      );
      const tools = (await client.listTools()).tools.map((tool) => tool.name).sort();
      assert.deepEqual(tools, ["list_projects", "whoami"]);
      assert.deepEqual(JSON.parse(textOf(await client.callTool({ name: "whoami" }))), {
        id: 4242,
        username: "ada",
        name: "Ada Lovelace",
      });
      assert.match(textOf(await client.callTool({ name: "list_projects" })), /^ada\/handbook /);
      // The demo's policy: delete_project is left out of the list above and refused, as the SDK
      // client sees a tool error (HTTP 200 with a JSON-RPC error, not a transport failure).
      await assert.rejects(
        client.callTool({ name: "delete_project", arguments: {} }),
        (error: Error) => {
          assert.match(error.message, /Tool "delete_project" is not allowed for this account/);
          return true;
        },
      );
      await waitFor(() => demo.logs.some((line) => line.includes('"policy":"deny"')));

      // The same token with SDK v2 pinned to 2026-07-28: /mcp answers that revision too.
      const v2 = new ClientV2(
        { name: "demo-test", version: "1.0.0" },
        { versionNegotiation: { mode: { pin: "2026-07-28" } } },
      );
      const token = provider.tokens()?.access_token ?? "";
      await v2.connect(
        new TransportV2(serverUrl, { authProvider: { token: () => Promise.resolve(token) } }),
      );
      try {
        const whoami = await v2.callTool({ name: "whoami", arguments: {} });
        const [content] = whoami.content as { type: string; text: string }[];
        assert.equal(JSON.parse(content.text).username, "ada");
      } finally {
        await v2.close();
      }

      assertMcpSignInRequests(demo.logs);
    } finally {
      await client.close();
      assert.equal(await demo.stop(), 0, "the demo stops cleanly on SIGTERM");
    }
  },
});

Deno.test({
  name:
    "demo: /mcp/docs signs in on its own; SDK v1 (2025-11-25) and SDK v2 pinned to 2026-07-28 call it",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const demo = await spawnService({ PORT: "0" }, demoRunArgs());
    const v1 = new Client({ name: "demo-test", version: "1.0.0" });
    const v2 = new ClientV2(
      { name: "demo-test", version: "1.0.0" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } } },
    );
    try {
      const docsUrl = new URL(`${demo.url}/mcp/docs`);
      const provider = new MemoryOAuthProvider("http://127.0.0.1:9/callback", "demo docs client");
      const first = new StreamableHTTPClientTransport(docsUrl, { authProvider: provider });
      await assert.rejects(
        new Client({ name: "demo-test", version: "1.0.0" }).connect(first),
        UnauthorizedError,
      );
      assert.ok(provider.authorizationUrl);
      assert.equal(provider.authorizationUrl.searchParams.get("resource"), docsUrl.href);
      const gitlabUrl = new URL(demo.listening.gitlab);
      const { callback } = await followPageWithoutBrowser(provider.authorizationUrl, gitlabUrl);
      await first.finishAuth(callback.searchParams.get("code") ?? "");

      await v1.connect(new StreamableHTTPClientTransport(docsUrl, { authProvider: provider }));
      assert.equal(v1.getServerVersion()?.name, "gitlab-demo-docs");
      assert.equal(textOf(await v1.callTool({ name: "docs_reader" })), "ada reads the handbook");

      const token = provider.tokens()?.access_token ?? "";
      await v2.connect(
        new TransportV2(docsUrl, { authProvider: { token: () => Promise.resolve(token) } }),
      );
      const read = await v2.readResource({ uri: HANDBOOK_URI });
      assert.match(String((read.contents[0] as { text?: string }).text), /demo handbook/);

      const atMain = await fetch(`${demo.url}/mcp`, mcpPostInit(token));
      await atMain.body?.cancel();
      assert.equal(atMain.status, 401, "a token for /mcp/docs is refused at /mcp");
    } finally {
      await v1.close();
      await v2.close();
      assert.equal(await demo.stop(), 0, "the demo stops cleanly on SIGTERM");
    }
  },
});

Deno.test({
  name:
    "demo: Deny at GitLab brings the example client back with access_denied, which it reports as such",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const demo = await spawnService({ PORT: "0", GITLAB_SIGN_IN: "redirect" }, demoRunArgs());
    try {
      await waitFor(() => demo.logs.some((line) => line.includes("Open the example client")));
      const banner = demo.logs.find((line) => line.includes("Open the example client")) ?? "";
      const clientUrl = banner.match(/http:\/\/127\.0\.0\.1:\d+\//)?.[0];
      assert.ok(clientUrl, banner);
      const start = await fetch(clientUrl, { redirect: "manual" });
      await start.body?.cancel();
      const authorize = start.headers.get("location") ?? "";
      assert.ok(authorize.startsWith(`${demo.url}/authorize?`), String(authorize));

      const callback = await redirectSignInWithoutBrowser(authorize, undefined, "deny");
      assert.equal(callback.searchParams.get("error"), "access_denied", callback.href);
      const answer = await fetch(callback);
      const html = await answer.text();
      assert.equal(answer.status, 200);
      assert.match(html, /<h1>Sign-in cancelled<\/h1>/);
      assert.match(html, /error=access_denied/);
      assert.doesNotMatch(html, /Token exchange failed|code is required/);
    } finally {
      assert.equal(await demo.stop(), 0);
    }
  },
});

Deno.test({
  name:
    "demo (device mode): the example client is registered and named; GitLab's word is Authorize; Deny → Return to the application → the client reports it",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const demo = await spawnService({ PORT: "0" }, demoRunArgs());
    try {
      await waitFor(() => demo.logs.some((line) => line.includes("Open the example client")));
      const banner = demo.logs.join("\n");
      assert.match(banner, /click Authorize \(or Deny/);
      assert.doesNotMatch(banner, /Approve/);
      const clientUrl = banner.match(/example client: +(http:\/\/127\.0\.0\.1:\d+\/)/)?.[1];
      assert.ok(clientUrl, banner);
      const start = await fetch(clientUrl, { redirect: "manual" });
      await start.body?.cancel();
      const authorize = new URL(start.headers.get("location") ?? "");
      assert.notEqual(authorize.searchParams.get("client_id"), "demo-client", "a registered id");
      const page = await (await fetch(authorize)).text();
      assert.match(page, /<bdi>Demo example client<\/bdi><\/strong> wants to sign you in/);
      assert.doesNotMatch(page, /id="client-unknown"/, "not 'unknown and unverified'");
      assert.match(page, /click <strong>Authorize<\/strong>/);

      const gitlabUrl = new URL(demo.listening.gitlab);
      const gitlabPage = await (await fetch(new URL("/oauth/device", gitlabUrl))).text();
      assert.match(gitlabPage, /value="approve">Authorize<\/button>/, "GitLab's word, too");
      const userCode = page.match(/<p id="user-code"[^>]*>([^<]+)<\/p>/)?.[1].trim() ?? "";
      const denied = await fetch(new URL("/oauth/device", gitlabUrl), {
        method: "POST",
        body: new URLSearchParams({ user_code: userCode, action: "deny" }),
      });
      assert.match(await denied.text(), /Device denied/);
      // The page's "Return to the application" link (shown once the poll reports the denial).
      const back = page.match(/<a class="button" id="return-link" href="([^"]+)"/)?.[1];
      assert.ok(back, "the page has a Return to the application link");
      assert.match(page, />Return to the application<\/a>/);
      const answer = await (await fetch(back.replaceAll("&amp;", "&"))).text();
      assert.match(answer, /<h1>Sign-in cancelled<\/h1>/);
      assert.match(answer, /error=access_denied/);
    } finally {
      assert.equal(await demo.stop(), 0);
    }
  },
});

Deno.test({
  name:
    "demo: leaves nothing in the temporary directory, however it ends (SIGTERM, SIGKILL, a start-up error)",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const tmp = await Deno.makeTempDir({ prefix: "demo-test-tmpdir-" });
    const leftover = () => [...Deno.readDirSync(tmp)].map((entry) => entry.name);
    try {
      for (const signal of ["SIGTERM", "SIGKILL"] as const) {
        await t.step(signal, async () => {
          const demo = await spawnService({ PORT: "0", TMPDIR: tmp }, demoRunArgs());
          await waitFor(() => demo.logs.some((line) => line.includes("Open the example client")));
          assert.equal(await demo.stop(signal), signal === "SIGTERM" ? 0 : 137);
          assert.deepEqual(leftover(), []);
        });
      }
      await t.step("PORT taken", async () => {
        using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
        const output = await new Deno.Command(Deno.execPath(), {
          args: demoRunArgs(),
          env: { PORT: String(taken.addr.port), TMPDIR: tmp },
          stdin: "null",
          stdout: "null",
          stderr: "piped",
        }).output();
        assert.equal(output.code, 1, new TextDecoder().decode(output.stderr));
        assert.deepEqual(leftover(), []);
      });
    } finally {
      await Deno.remove(tmp, { recursive: true });
    }
  },
});

/** A free port on `hostname`, or undefined when this machine has no such address. */
function freePort(hostname: string): string | undefined {
  try {
    const listener = Deno.listen({ hostname, port: 0 });
    listener.close();
    return String(listener.addr.port);
  } catch {
    return undefined;
  }
}

/** The issuer the demo's metadata names when it listens on `host` with the redirect sign-in. */
async function redirectDemoIssuer(host: string, reachedAt: string, port: string): Promise<string> {
  const demo = await spawnService(
    { PORT: port, HOST: host, GITLAB_SIGN_IN: "redirect" },
    demoRunArgs(),
  );
  try {
    const response = await fetch(`${reachedAt}/.well-known/oauth-authorization-server`);
    assert.equal(response.status, 200);
    return (await response.json()).issuer;
  } finally {
    assert.equal(await demo.stop(), 0);
  }
}

Deno.test({
  name: "demo: the redirect sign-in on every interface (HOST=0.0.0.0) is issued for loopback",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const port = freePort("127.0.0.1") ?? "";
    const base = `http://127.0.0.1:${port}`;
    assert.equal(await redirectDemoIssuer("0.0.0.0", base, port), base);
  },
});

const IPV6_PORT = freePort("::1");
Deno.test({
  name: "demo: the redirect sign-in on an IPv6 HOST gets a bracketed BASE_URL",
  ignore: IPV6_PORT === undefined,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const base = `http://[::1]:${IPV6_PORT}`;
    assert.equal(await redirectDemoIssuer("::1", base, IPV6_PORT ?? ""), base);
  },
});

Deno.test("demo and deploy MCP servers: their tools are annotated read-only, so clients do not call them destructive", async () => {
  const mcp = startDemoMcpServer(new URL("http://127.0.0.1:9/"));
  const client = new Client({ name: "annotations-test", version: "1.0.0" });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(mcp.url)));
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((tool) => tool.name).sort(), ["list_projects", "whoami"]);
    for (const tool of tools) {
      assert.equal(tool.annotations?.readOnlyHint, true, tool.name);
      assert.equal(tool.annotations?.destructiveHint, false, tool.name);
    }
  } finally {
    await client.close();
    await mcp.close();
  }
  const deployed = await createExampleMcpServer(new URL("http://127.0.0.1:9/"))(
    new Request("http://mcp.test/mcp", {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    }),
  );
  const { result } = await deployed.json();
  for (const tool of result.tools) {
    assert.equal(tool.annotations?.readOnlyHint, true, tool.name);
    assert.equal(tool.annotations?.destructiveHint, false, tool.name);
  }
});
