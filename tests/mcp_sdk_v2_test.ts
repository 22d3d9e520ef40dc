/**
 * MCP protocol revision 2026-07-28 with the official TypeScript SDK v2 (client and server
 * 2.4.0), once directly and once through the gateway with a real access token: discovery
 * (`server/discover`), `tools/list`, a `tools/call` whose tool declares an `x-mcp-header`
 * parameter (the MCP server must receive `Mcp-Param-Region` with the argument's value, and the
 * SDK's handler refuses the call with 400 / -32020 HeaderMismatch when it does not), a
 * `resources/read`, and a `subscriptions/listen` stream that receives a change notification.
 * The direct run proves the harness; the gateway run proves the gateway carries the revision.
 * The SDK v1 tests (2025-11-25: sessions, GET streams, DELETE) live in gateway_test.ts.
 */

import assert from "node:assert/strict";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { issueTokens, makeTestApp, TEST_BASE, type TestApp } from "./_helpers.ts";
import { inProcessFetch } from "./_mcp_upstream.ts";
import {
  type McpV2Upstream,
  NOTE_TEXT,
  NOTE_URI,
  ROUTE_TOOL,
  type RouteAnswer,
  startMcpV2Upstream,
} from "./_mcp_v2_upstream.ts";

const MODERN = "2026-07-28";
/** Bounds every network step: a proxy that buffers or drops a stream hangs instead of failing. */
const STEP_MS = 10_000;

function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Where the client connects, and how. */
interface Route {
  url: URL;
  fetch?: typeof fetch;
  accessToken?: string;
}

function modernClient(): Client {
  return new Client(
    { name: "mcp-sdk-v2-test", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: MODERN } } },
  );
}

function transportFor(route: Route): StreamableHTTPClientTransport {
  const { accessToken } = route;
  return new StreamableHTTPClientTransport(route.url, {
    fetch: route.fetch,
    authProvider: accessToken === undefined
      ? undefined
      : { token: () => Promise.resolve(accessToken) },
  });
}

/** The `mcp-method` header of every request the MCP server received. */
function methodsSeen(upstream: McpV2Upstream): (string | null)[] {
  return upstream.requests.map(({ headers }) => headers.get("mcp-method"));
}

/** What the MCP server refused, to explain a client-side failure (e.g. 400 / -32020). */
function refusals(upstream: McpV2Upstream): string {
  const refused = upstream.requests.flatMap(({ refusal }) =>
    refusal ? [`${refusal.status} ${refusal.body}`] : []
  );
  return refused.length > 0 ? `; the MCP server refused: ${refused.join(" | ")}` : "";
}

/** Rethrows `promise`'s rejection with what the MCP server refused, if anything. */
async function explained<T>(promise: Promise<T>, upstream: McpV2Upstream): Promise<T> {
  try {
    return await promise;
  } catch (error) {
    throw new Error(`${error}${refusals(upstream)}`, { cause: error });
  }
}

/** Runs every 2026-07-28 step as its own test step, against `route` in front of `upstream`. */
async function exerciseRevision(
  t: Deno.TestContext,
  upstream: McpV2Upstream,
  route: Route,
): Promise<void> {
  const client = modernClient();
  try {
    await t.step("discovery: server/discover finds 2026-07-28", async () => {
      await explained(within(client.connect(transportFor(route)), STEP_MS, "connect"), upstream);
      assert.equal(client.getProtocolEra(), "modern");
      assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
      assert.ok(client.getDiscoverResult()?.supportedVersions.includes(MODERN));
      assert.ok(methodsSeen(upstream).includes("server/discover"), "the probe reached the server");
    });

    await t.step("tools/list shows the x-mcp-header declaration", async () => {
      const { tools } = await explained(
        within(client.listTools(), STEP_MS, "tools/list"),
        upstream,
      );
      const route = tools.find(({ name }) => name === ROUTE_TOOL);
      assert.ok(route, JSON.stringify(tools));
      const region = (route.inputSchema.properties as Record<string, Record<string, unknown>>)
        .region;
      assert.equal(region["x-mcp-header"], "Region");
    });

    await t.step(
      "tools/call: the MCP server receives Mcp-Param-Region with the argument",
      async () => {
        const call = client.callTool({
          name: ROUTE_TOOL,
          arguments: { region: "eu-west-1", query: "q" },
        });
        const result = await explained(within(call, STEP_MS, "tools/call"), upstream);
        assert.notEqual(result.isError, true, JSON.stringify(result));
        const [content] = result.content as { type: string; text: string }[];
        const answer: RouteAnswer = JSON.parse(content.text);
        assert.deepEqual(answer, {
          region: "eu-west-1",
          mcpParamRegion: "eu-west-1",
          mcpMethod: "tools/call",
          mcpName: ROUTE_TOOL,
        });
      },
    );

    await t.step("resources/read", async () => {
      const { contents } = await explained(
        within(client.readResource({ uri: NOTE_URI }), STEP_MS, "resources/read"),
        upstream,
      );
      assert.deepEqual(contents, [{ uri: NOTE_URI, mimeType: "text/plain", text: NOTE_TEXT }]);
    });

    await t.step("subscriptions/listen receives notifications/resources/updated", async () => {
      const updated = Promise.withResolvers<string>();
      client.setNotificationHandler("notifications/resources/updated", (notification) => {
        updated.resolve(notification.params.uri);
        return Promise.resolve();
      });
      const subscription = await explained(
        within(
          client.listen({ resourceSubscriptions: [NOTE_URI] }),
          STEP_MS,
          "subscriptions/listen",
        ),
        upstream,
      );
      try {
        assert.deepEqual(subscription.honoredFilter, { resourceSubscriptions: [NOTE_URI] });
        upstream.resourceUpdated(NOTE_URI);
        assert.equal(await within(updated.promise, STEP_MS, "the notification"), NOTE_URI);
      } finally {
        await subscription.close();
      }
      assert.equal(await within(subscription.closed, STEP_MS, "closing the stream"), "local");
    });
  } finally {
    await client.close();
  }
}

Deno.test("MCP SDK v2 (2026-07-28) directly: the harness works without the gateway", async (t) => {
  const upstream = startMcpV2Upstream();
  try {
    await exerciseRevision(t, upstream, { url: new URL(upstream.url) });
  } finally {
    await upstream.close();
  }
});

/** An app in gateway mode in front of `upstreamUrl`, with a signed-in user. */
async function gatewayApp(upstreamUrl: string): Promise<{ t: TestApp; accessToken: string }> {
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: upstreamUrl } });
  const { access_token } = await issueTokens(t);
  return { t, accessToken: access_token };
}

Deno.test("MCP SDK v2 (2026-07-28) through the gateway: discover, tools, x-mcp-header, resources, listen", async (t) => {
  const upstream = startMcpV2Upstream();
  const { t: app, accessToken } = await gatewayApp(upstream.url);
  try {
    await exerciseRevision(t, upstream, {
      url: new URL(`${TEST_BASE}/mcp`),
      fetch: inProcessFetch(app.app),
      accessToken,
    });
    for (const { headers } of upstream.requests) {
      assert.notEqual(
        headers.get("authorization"),
        `Bearer ${accessToken}`,
        "our token never reaches the MCP server",
      );
    }
  } finally {
    app.close();
    await upstream.close();
  }
});
