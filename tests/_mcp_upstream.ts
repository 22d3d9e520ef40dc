/**
 * A real MCP server for gateway tests, built with the MCP SDK (`McpServer` and the
 * web-standard Streamable HTTP transport, stateful: it hands out `Mcp-Session-Id`), served on
 * loopback. Its `whoami` tool reports the credentials the request carried; every request's
 * headers are recorded. Also: a fetch that runs an in-process app the way a socket would.
 */

// The SDK's `./*` export maps `x.js` to `x.js.d.ts`; @ts-types points the checker at `x.d.ts`.
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import type { FetchHandler } from "../src/app.ts";

/** What the `whoami` tool answers (as JSON text). */
export interface WhoAmI {
  authorization: string | null;
  privateToken: string | null;
  mcpSessionId: string | null;
}

/** A running MCP server. */
export interface McpUpstream {
  /** e.g. `http://127.0.0.1:40123/mcp` */
  url: string;
  /** Headers of every request received, in order. */
  requests: { method: string; headers: Headers }[];
  /** Session ids the server handed out. */
  sessionIds: string[];
  close(): Promise<void>;
}

/** Starts the SDK-based MCP server on a random loopback port. */
export function startMcpUpstream(): McpUpstream {
  const transports = new Map<string, WebStandardStreamableHTTPServerTransport>();
  const requests: McpUpstream["requests"] = [];
  const sessionIds: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    requests.push({ method: request.method, headers: new Headers(request.headers) });
    const sessionId = request.headers.get("mcp-session-id");
    if (sessionId) {
      const transport = transports.get(sessionId);
      return transport
        ? transport.handleRequest(request)
        : Promise.resolve(Response.json({ error: "unknown session" }, { status: 404 }));
    }
    return startSession(request, transports, sessionIds);
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    requests,
    sessionIds,
    async close() {
      await Promise.all([...transports.values()].map((transport) => transport.close()));
      await server.shutdown();
    },
  };
}

async function startSession(
  request: Request,
  transports: Map<string, WebStandardStreamableHTTPServerTransport>,
  sessionIds: string[],
): Promise<Response> {
  const transport: WebStandardStreamableHTTPServerTransport =
    new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      keepAliveMs: 0,
      onsessioninitialized: (id) => {
        transports.set(id, transport);
        sessionIds.push(id);
      },
      onsessionclosed: (id) => void transports.delete(id),
    });
  await createMcpServer().connect(transport);
  return await transport.handleRequest(request);
}

function createMcpServer(): McpServer {
  const server = new McpServer({ name: "gateway-test-upstream", version: "1.0.0" });
  server.registerTool(
    "whoami",
    { description: "Reports the credentials this request reached the MCP server with" },
    (extra) => {
      const headers = new Headers();
      for (const [name, value] of Object.entries(extra.requestInfo?.headers ?? {})) {
        if (value !== undefined) headers.set(name, String(value));
      }
      const answer: WhoAmI = {
        authorization: headers.get("authorization"),
        privateToken: headers.get("private-token"),
        mcpSessionId: headers.get("mcp-session-id"),
      };
      return { content: [{ type: "text", text: JSON.stringify(answer) }] };
    },
  );
  return server;
}

/**
 * A fetch that calls the app in-process. Like a real fetch, aborting the request's signal
 * errors a response body still being read (the SDK client relies on it to stop event streams).
 */
export function inProcessFetch(app: FetchHandler): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    const response = await app(request);
    if (!response.body || !init?.signal) return response;
    const body = response.body.pipeThrough(new TransformStream(), { signal: init.signal });
    const { status, statusText, headers } = response;
    return new Response(body, { status, statusText, headers });
  };
}
