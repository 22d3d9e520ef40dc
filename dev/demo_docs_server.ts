/**
 * The demo's second MCP server, behind the service at `/mcp/docs` (issue 35): built with the MCP
 * TypeScript SDK v2 (`@modelcontextprotocol/server`, `createMcpHandler`), so it answers protocol
 * revision 2026-07-28 (`server/discover`, stateless) as well as 2025-11-25 (`initialize`). Its
 * tool asks the (simulated) GitLab who the token belongs to, so a newcomer sees that this
 * server, too, receives the user's GitLab token and never the client's.
 *
 * Development only (the MCP SDK is a dev dependency).
 */

import {
  createMcpHandler,
  hostHeaderValidationResponse,
  localhostAllowedHostnames,
  McpServer,
} from "@modelcontextprotocol/server";
import { READ_ONLY_TOOL } from "./demo_mcp_server.ts";

/** The handbook page the server serves as a resource. */
export const HANDBOOK_URI = "docs://handbook/welcome";
const HANDBOOK_TEXT = "Welcome to the demo handbook. Every page here is simulated.";

/** The running docs server. */
export interface DemoDocsServer {
  /** e.g. `http://127.0.0.1:40123/mcp` */
  url: string;
  close(): Promise<void>;
}

/** Starts the docs server on a random loopback port; its tool calls `gitlabUrl`'s API. */
export function startDemoDocsServer(gitlabUrl: URL): DemoDocsServer {
  const handler = createMcpHandler(() => createDocsServer(gitlabUrl));
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) =>
      hostHeaderValidationResponse(request, localhostAllowedHostnames()) ?? handler.fetch(request),
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    async close() {
      await handler.close();
      await server.shutdown();
    },
  };
}

function createDocsServer(gitlabUrl: URL): McpServer {
  const server = new McpServer({ name: "gitlab-demo-docs", version: "1.0.0" });
  server.registerTool(
    "docs_reader",
    {
      title: "Who reads the docs",
      description: "The GitLab user this docs session is signed in as",
      annotations: READ_ONLY_TOOL,
    },
    async (ctx) => {
      const bearer = /^Bearer\s+(\S+)$/i.exec(ctx.http?.req?.headers.get("authorization") ?? "");
      if (!bearer) return failure("no GitLab token reached the docs server");
      const response = await fetch(new URL("/api/v4/user", gitlabUrl), {
        headers: { Authorization: `Bearer ${bearer[1]}` },
      });
      if (!response.ok) {
        await response.body?.cancel();
        return failure(`GitLab answered ${response.status}`);
      }
      const { username } = await response.json() as { username: string };
      return { content: [{ type: "text", text: `${username} reads the handbook` }] };
    },
  );
  server.registerResource(
    "handbook",
    HANDBOOK_URI,
    { description: "The handbook's welcome page", mimeType: "text/plain" },
    (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: HANDBOOK_TEXT }] }),
  );
  return server;
}

function failure(text: string) {
  return { content: [{ type: "text" as const, text }], isError: true };
}
