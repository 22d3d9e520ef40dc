/**
 * Serves MCP servers built with the MCP SDK over Streamable HTTP (the web-standard transport,
 * stateful: each `initialize` gets a server and an `Mcp-Session-Id`). Used by the demo's MCP
 * server and by the gateway tests' upstream.
 *
 * Development only: the SDK is a dev dependency, and nothing under src/ imports this module.
 *
 * @see MCP spec "Transports: Streamable HTTP"
 */

// The SDK's `./*` export maps `x.js` to `x.js.d.ts`; @ts-types points the checker at `x.d.ts`.
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
// @ts-types="@modelcontextprotocol/sdk/server/index"
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";

/** Where and how to serve. */
export interface McpHttpOptions {
  /** Default 127.0.0.1. */
  hostname?: string;
  /** Default 0: a random free port. */
  port?: number;
  /** Sees every request before it is handled (tests record headers). */
  onRequest?(request: Request): void;
  /** Answers a request instead of the MCP server when it returns a response (e.g. 403). */
  refuse?(request: Request): Response | undefined;
}

/** A running MCP server. */
export interface McpHttpServer {
  /** e.g. `http://127.0.0.1:40123/mcp` (every path answers alike). */
  url: string;
  /** Session ids handed out, in order. */
  sessionIds: string[];
  close(): Promise<void>;
}

/** Serves a fresh `createServer()` (high- or low-level SDK server) for every MCP session. */
export function serveMcp(
  createServer: () => McpServer | Server,
  options: McpHttpOptions = {},
): McpHttpServer {
  const transports = new Map<string, WebStandardStreamableHTTPServerTransport>();
  const sessionIds: string[] = [];
  const hostname = options.hostname ?? "127.0.0.1";

  async function startSession(request: Request): Promise<Response> {
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
    await createServer().connect(transport);
    return await transport.handleRequest(request);
  }

  const server = Deno.serve({ hostname, port: options.port ?? 0, onListen() {} }, (request) => {
    options.onRequest?.(request);
    const refusal = options.refuse?.(request);
    if (refusal) return refusal;
    const sessionId = request.headers.get("mcp-session-id");
    if (!sessionId) return startSession(request);
    const transport = transports.get(sessionId);
    return transport
      ? transport.handleRequest(request)
      : Promise.resolve(Response.json({ error: "unknown session" }, { status: 404 }));
  });
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  return {
    url: `http://${host}:${server.addr.port}/mcp`,
    sessionIds,
    async close() {
      await Promise.all([...transports.values()].map((transport) => transport.close()));
      await server.shutdown();
    },
  };
}

/** The request's headers as the SDK hands them to a tool (`extra.requestInfo.headers`). */
export function toolRequestHeaders(
  requestInfo: { headers?: Record<string, string | string[] | undefined> } | undefined,
): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(requestInfo?.headers ?? {})) {
    if (value !== undefined) headers.set(name, String(value));
  }
  return headers;
}
