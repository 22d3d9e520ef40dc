/**
 * The conformance fixtures of dev/conformance_server.ts for protocol revision 2026-07-28, with
 * the MCP TypeScript SDK v2 (`@modelcontextprotocol/server`, `createMcpHandler`: stateless,
 * `server/discover`, caching hints, header checks), served on loopback with the SDK's Host and
 * Origin checks against DNS rebinding. Tools that ask the client for input the 2025 way
 * (sampling, elicitation) are left out: 2026-07-28 asks through input-required results, whose
 * fixtures are not written yet.
 *
 * Used by tests/mcp_conformance_test.ts; `deno run -A dev/conformance_server_v2.ts` prints its
 * URL. Development only.
 */

import {
  createMcpHandler,
  hostHeaderValidationResponse,
  localhostAllowedHostnames,
  localhostAllowedOrigins,
  originValidationResponse,
  ProtocolError,
  ProtocolErrorCode,
  ResourceNotFoundError,
  Server,
  type Tool,
} from "@modelcontextprotocol/server";
import {
  completeFixture,
  getFixturePrompt,
  PROMPTS,
  readFixture,
  RESOURCES,
  TEMPLATE,
  type ToolCall,
  TOOLS,
} from "./conformance_server.ts";

/** The 2025-era tools that need a server-to-client request. */
const ASKS_CLIENT = new Set([
  "test_sampling",
  "test_elicitation",
  "test_elicitation_sep1034_defaults",
  "test_elicitation_sep1330_enums",
]);
const MODERN_TOOLS = TOOLS.filter(({ tool }) => !ASKS_CLIENT.has(tool.name));

function invalidParams(message: string): ProtocolError {
  return new ProtocolError(ProtocolErrorCode.InvalidParams, message);
}

function createModernServer(): Server {
  const server = new Server(
    { name: "gitlab-mcp-auth-conformance-fixtures", version: "1.0.0" },
    {
      capabilities: {
        tools: {},
        resources: {},
        prompts: {},
        completions: {},
        logging: {},
      },
    },
  );
  // The tables are plain JSON typed with SDK v1's types, which v2 types more narrowly.
  const tools = MODERN_TOOLS.map(({ tool }) => tool) as unknown as Tool[];
  server.setRequestHandler("tools/list", () => ({ tools }));
  server.setRequestHandler("tools/call", async (request, ctx) => {
    const fixture = MODERN_TOOLS.find(({ tool }) => tool.name === request.params.name);
    if (!fixture) throw invalidParams(`no tool ${request.params.name}`);
    const call: ToolCall = {
      args: request.params.arguments ?? {},
      progressToken: request.params._meta?.progressToken,
      notify: (method, params) => ctx.mcpReq.notify({ method, params }),
      ask: () => Promise.reject(invalidParams("this tool asks no input")),
    };
    return await fixture.call(call);
  });
  server.setRequestHandler("resources/list", () => ({
    resources: RESOURCES.map(({ resource }) => resource),
  }));
  server.setRequestHandler("resources/templates/list", () => ({ resourceTemplates: [TEMPLATE] }));
  server.setRequestHandler("resources/read", (request) => {
    const result = readFixture(request.params.uri);
    if (!result) throw new ResourceNotFoundError(request.params.uri);
    return result;
  });
  server.setRequestHandler("prompts/list", () => ({
    prompts: PROMPTS.map(({ prompt }) => prompt),
  }));
  server.setRequestHandler("prompts/get", (request) => {
    const answer = getFixturePrompt(request.params.name, request.params.arguments ?? {});
    if (typeof answer === "string") throw invalidParams(answer);
    return answer;
  });
  server.setRequestHandler(
    "completion/complete",
    (request) => completeFixture(request.params.argument.value),
  );
  return server;
}

/** A running 2026-07-28 fixture server. */
export interface ModernConformanceServer {
  /** e.g. `http://127.0.0.1:40123/mcp` */
  url: string;
  close(): Promise<void>;
}

/** Serves the 2026-07-28 fixtures on a random loopback port. */
export function startModernConformanceServer(): ModernConformanceServer {
  const handler = createMcpHandler(createModernServer);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) =>
      hostHeaderValidationResponse(request, localhostAllowedHostnames()) ??
        originValidationResponse(request, localhostAllowedOrigins()) ??
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

if (import.meta.main) {
  const { url } = startModernConformanceServer();
  // deno-lint-ignore no-console
  console.log(url);
}
