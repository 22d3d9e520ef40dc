/**
 * A real MCP server for protocol revision 2026-07-28, built with the MCP TypeScript SDK v2
 * (`@modelcontextprotocol/server`, `createMcpHandler`: stateless, one server instance per
 * request, `server/discover` instead of `initialize`) and served on loopback. It has a tool with
 * an `x-mcp-header` parameter (SEP-2243: the client mirrors that argument into an
 * `Mcp-Param-Region` header, and the SDK's handler refuses a call whose header is missing or
 * disagrees with the body, 400 / -32020 HeaderMismatch), a resource, and resource subscriptions
 * (`subscriptions/listen` streams, published through `handler.notify`). Every request's method
 * and headers are recorded. Test-only: nothing under src/ reaches the SDK v2.
 */

import { createMcpHandler, fromJsonSchema, McpServer } from "@modelcontextprotocol/server";

/** The resource the server serves and publishes updates for. */
export const NOTE_URI = "note://greeting";
export const NOTE_TEXT = "hello from the 2026-07-28 server";

/** The tool whose `region` argument travels in a header too. */
export const ROUTE_TOOL = "route";
const ROUTE_INPUT_SCHEMA = {
  type: "object",
  properties: {
    region: { type: "string", "x-mcp-header": "Region" },
    query: { type: "string" },
  },
  required: ["region"],
} as const;

/** What the `route` tool answers (as JSON text): its argument and the header it came with. */
export interface RouteAnswer {
  region: string;
  mcpParamRegion: string | null;
  mcpMethod: string | null;
  mcpName: string | null;
}

/** One HTTP request the server received, and, when it refused it, its answer. */
export interface RecordedRequest {
  method: string;
  headers: Headers;
  refusal?: { status: number; body: string };
}

/** A running SDK v2 MCP server. */
export interface McpV2Upstream {
  /** e.g. `http://127.0.0.1:40123/mcp` */
  url: string;
  requests: RecordedRequest[];
  /** Publishes `notifications/resources/updated` for `uri` to every listening client. */
  resourceUpdated(uri: string): void;
  close(): Promise<void>;
}

function buildServer(): McpServer {
  const server = new McpServer(
    { name: "gateway-test-upstream-v2", version: "1.0.0" },
    { capabilities: { resources: { subscribe: true, listChanged: true } } },
  );
  server.registerTool(
    ROUTE_TOOL,
    {
      description: "Routes a query to a region named in a header as well as in the body",
      inputSchema: fromJsonSchema<{ region: string; query?: string }>(ROUTE_INPUT_SCHEMA),
    },
    (args, ctx) => {
      const headers = ctx.http?.req?.headers;
      const answer: RouteAnswer = {
        region: args.region,
        mcpParamRegion: headers?.get("mcp-param-region") ?? null,
        mcpMethod: headers?.get("mcp-method") ?? null,
        mcpName: headers?.get("mcp-name") ?? null,
      };
      return { content: [{ type: "text", text: JSON.stringify(answer) }] };
    },
  );
  server.registerResource(
    "greeting",
    NOTE_URI,
    { description: "A note whose updates clients can listen for", mimeType: "text/plain" },
    (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: NOTE_TEXT }] }),
  );
  return server;
}

/** Starts the SDK v2 MCP server on a random loopback port. */
export function startMcpV2Upstream(): McpV2Upstream {
  const requests: RecordedRequest[] = [];
  const handler = createMcpHandler(buildServer);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const recorded: RecordedRequest = {
      method: request.method,
      headers: new Headers(request.headers),
    };
    requests.push(recorded);
    const response = await handler.fetch(request);
    if (response.status >= 400) {
      recorded.refusal = { status: response.status, body: await response.clone().text() };
    }
    return response;
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    requests,
    resourceUpdated: (uri) => handler.notify.resourceUpdated(uri),
    async close() {
      await handler.close();
      await server.shutdown();
    },
  };
}
