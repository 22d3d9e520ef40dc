/**
 * The smallest MCP server worth putting behind the gateway (compose.yaml's `mcp` service):
 * Streamable HTTP without sessions, JSON answers, one tool, `whoami`, that asks GitLab who the
 * forwarded token belongs to. No dependencies, so the stock Deno image runs it as it is.
 *
 * env: GITLAB_URL (default https://gitlab.com), PORT (default 3000).
 *
 * @see https://modelcontextprotocol.io/specification/2025-06-18/basic/transports
 */

const PROTOCOL_VERSION = "2025-06-18";

interface JsonRpcRequest {
  jsonrpc: "2.0";
  id?: string | number;
  method: string;
  params?: { name?: string; protocolVersion?: string };
}

const WHOAMI_TOOL = {
  name: "whoami",
  description: "The GitLab user this MCP session acts for",
  inputSchema: { type: "object", properties: {} },
  // It only reads: without the hints, clients assume a tool may destroy things.
  annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true },
};

/** The MCP endpoint: POST JSON-RPC in, JSON out; the gateway's Bearer is the GitLab token. */
export function createExampleMcpServer(gitlabUrl: URL): (request: Request) => Promise<Response> {
  return async (request) => {
    if (request.method !== "POST") {
      return new Response(null, { status: 405, headers: { Allow: "POST" } });
    }
    let message: JsonRpcRequest;
    try {
      message = await request.json();
    } catch {
      return rpcError(null, -32700, "Parse error");
    }
    if (message.id === undefined) return new Response(null, { status: 202 }); // a notification
    const token = request.headers.get("authorization") ?? "";
    switch (message.method) {
      case "initialize":
        return rpcResult(message.id, {
          protocolVersion: message.params?.protocolVersion ?? PROTOCOL_VERSION,
          capabilities: { tools: {} },
          serverInfo: { name: "example-gitlab-mcp", version: "1.0.0" },
        });
      case "ping":
        return rpcResult(message.id, {});
      case "tools/list":
        return rpcResult(message.id, { tools: [WHOAMI_TOOL] });
      case "tools/call":
        if (message.params?.name !== WHOAMI_TOOL.name) {
          return rpcError(message.id, -32602, "Unknown tool");
        }
        return rpcResult(message.id, await whoami(gitlabUrl, token));
      default:
        return rpcError(message.id, -32601, "Method not found");
    }
  };
}

async function whoami(gitlabUrl: URL, authorization: string) {
  const response = await fetch(new URL("api/v4/user", withSlash(gitlabUrl)), {
    headers: { Authorization: authorization },
  });
  if (!response.ok) {
    await response.body?.cancel();
    return { isError: true, content: [{ type: "text", text: `GitLab ${response.status}` }] };
  }
  const { id, username, name } = await response.json();
  return { content: [{ type: "text", text: JSON.stringify({ id, username, name }) }] };
}

function withSlash(url: URL): URL {
  return new URL(url.href.endsWith("/") ? url.href : `${url.href}/`);
}

function rpcResult(id: string | number, result: unknown): Response {
  return Response.json({ jsonrpc: "2.0", id, result });
}

function rpcError(id: string | number | null, code: number, message: string): Response {
  return Response.json({ jsonrpc: "2.0", id, error: { code, message } });
}

if (import.meta.main) {
  const gitlabUrl = new URL(Deno.env.get("GITLAB_URL") ?? "https://gitlab.com");
  Deno.serve({ port: Number(Deno.env.get("PORT") ?? "3000") }, createExampleMcpServer(gitlabUrl));
}
