/**
 * The demo's MCP server, behind the service's gateway: its tools call the (simulated) GitLab
 * API with the GitLab token the gateway put in place of the client's, so a tool answer shows
 * whose GitLab account the MCP client reached.
 *
 * Built with the MCP TypeScript SDK v2 (`@modelcontextprotocol/server`, `createMcpHandler`), like
 * the docs server beside it: its dependency closure is three packages, where SDK v1's server
 * brings express, hono and some ninety more to every first `deno task demo` (issue 33 §2.7).
 *
 * Development only (dev/deno.json is the demo's configuration, not the service's).
 */

import {
  createMcpHandler,
  hostHeaderValidationResponse,
  localhostAllowedHostnames,
  McpServer,
} from "@modelcontextprotocol/server";

/** A tool's answer: text for the model, and whether it is an error. */
interface ToolAnswer {
  [key: string]: unknown;
  content: { type: "text"; text: string }[];
  isError?: boolean;
}

/** A running demo MCP server. */
export interface DemoMcpServer {
  /** e.g. `http://127.0.0.1:40123/mcp` (every path answers alike). */
  url: string;
  close(): Promise<void>;
}

/**
 * Starts the demo's MCP server on a random loopback port; its tools call `gitlabUrl`'s API.
 * `withRefusedTool` adds `delete_project`, which the demo's policy lets no demo user call.
 */
export function startDemoMcpServer(
  gitlabUrl: URL,
  options: { withRefusedTool?: boolean } = {},
): DemoMcpServer {
  const handler = createMcpHandler(() => {
    const server = createDemoMcpServer(gitlabUrl);
    if (options.withRefusedTool) registerDeleteProject(server);
    return server;
  });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) =>
      hostHeaderValidationResponse(request, localhostAllowedHostnames()) ??
        handler.fetch(request),
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    async close() {
      await handler.close();
      await server.shutdown();
    },
  };
}

/**
 * A destructive tool the demo's MCP_POLICY_FILE allows only to maintainers of `demo/admins`,
 * a group the simulated user is not in: the gateway leaves it out of `tools/list` and refuses a
 * call to it, which never arrives here.
 */
function registerDeleteProject(server: McpServer): void {
  server.registerTool(
    "delete_project",
    {
      title: "Delete a GitLab project",
      description: "Refused by the gateway's policy in the demo: it never gets here",
      annotations: { readOnlyHint: false, destructiveHint: true },
    },
    () => failure("the gateway's policy should have refused this call"),
  );
}

/**
 * Both tools only read GitLab. Without these hints clients assume the MCP defaults (a tool may
 * change and destroy things) and label `whoami` destructive or ask before every call.
 */
export const READ_ONLY_TOOL = {
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
};

function createDemoMcpServer(gitlabUrl: URL): McpServer {
  const server = new McpServer({ name: "gitlab-demo", version: "1.0.0" });
  server.registerTool(
    "whoami",
    {
      title: "Who am I on GitLab",
      description: "The GitLab user this MCP session is signed in as",
      annotations: READ_ONLY_TOOL,
    },
    async (ctx) =>
      await callGitLab(
        gitlabUrl,
        "/api/v4/user",
        gitlabToken(ctx.http?.req?.headers),
        (user) => {
          const { id, username, name } = user as {
            id: number;
            username: string;
            name: string;
          };
          return JSON.stringify({ id, username, name });
        },
      ),
  );
  server.registerTool(
    "list_projects",
    {
      title: "My GitLab projects",
      description: "The GitLab projects of the signed-in user",
      annotations: READ_ONLY_TOOL,
    },
    async (ctx) =>
      await callGitLab(
        gitlabUrl,
        "/api/v4/projects?membership=true",
        gitlabToken(ctx.http?.req?.headers),
        (list) =>
          (list as { path_with_namespace: string; web_url: string }[])
            .map((project) => `${project.path_with_namespace}  ${project.web_url}`)
            .join("\n"),
      ),
  );
  return server;
}

/** The GitLab token the gateway forwarded (Authorization, or PRIVATE-TOKEN if so configured). */
function gitlabToken(headers: Headers | undefined): string | undefined {
  const bearer = /^Bearer\s+(\S+)$/i.exec(headers?.get("authorization") ?? "")
    ?.[1];
  return bearer ?? headers?.get("private-token") ?? undefined;
}

async function callGitLab(
  gitlabUrl: URL,
  path: string,
  token: string | undefined,
  describe: (body: unknown) => string,
): Promise<ToolAnswer> {
  if (!token) return failure("no GitLab token reached the MCP server");
  const response = await fetch(new URL(path, gitlabUrl), {
    headers: { Authorization: `Bearer ${token}` },
  });
  if (!response.ok) {
    await response.body?.cancel();
    return failure(`GitLab answered ${response.status} to ${path}`);
  }
  return { content: [{ type: "text", text: describe(await response.json()) }] };
}

function failure(text: string): ToolAnswer {
  return { content: [{ type: "text", text }], isError: true };
}
