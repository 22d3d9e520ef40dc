/**
 * A real MCP server for gateway tests, built with the MCP SDK and served on loopback by
 * dev/mcp_http.ts (stateful Streamable HTTP: it hands out `Mcp-Session-Id`). Its `whoami` tool
 * reports the credentials the request carried; every request's headers are recorded. Also: a fetch that runs an in-process app the way a socket would.
 */

// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { serveMcp, toolRequestHeaders } from "../dev/mcp_http.ts";
import type { FetchHandler } from "../src/app/app.ts";

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
  const requests: McpUpstream["requests"] = [];
  const served = serveMcp(createMcpServer, {
    onRequest: (request) =>
      requests.push({ method: request.method, headers: new Headers(request.headers) }),
  });
  return { ...served, requests };
}

function createMcpServer(): McpServer {
  const server = new McpServer({ name: "gateway-test-upstream", version: "1.0.0" });
  server.registerTool(
    "whoami",
    { description: "Reports the credentials this request reached the MCP server with" },
    (extra) => {
      const headers = toolRequestHeaders(extra.requestInfo);
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
