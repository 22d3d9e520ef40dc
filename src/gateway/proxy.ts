/**
 * Gateway mode (MCP_UPSTREAM_URL set): every request to the MCP resource path is authenticated
 * with the resource guard and forwarded to the MCP server with the user's upstream token in place
 * of ours (exchange.ts: the request's steps). A request's body is read whole first (bounded: its
 * JSON-RPC message is checked and decided before anything goes on); answers stream back, so
 * Server-Sent Events reach the client event by event. Only allow-listed headers pass either way
 * (headers.ts), and an `Mcp-Session-Id` works only with the session it was handed to.
 *
 * @see MCP spec "Streamable HTTP", "Authorization" and security best practices ("Session
 *   Hijacking")
 */

import { mcpResourceUrl, namedServerResource } from "../http/resource.ts";
import { createAudit } from "./audit.ts";
import { createDeadlines } from "./deadlines.ts";
import type { Gateway, GatewayDeps } from "./deps.ts";
import { type GatewayContext, runExchange } from "./exchange.ts";
import { createSessionRateLimit } from "./session_rate_limit.ts";
import type { McpClient } from "./mcp_client/types.ts";
import { DEFAULT_SERVER, type TokenHeader } from "./servers_file.ts";

/** The gateway as the app sees it. */
export interface McpGateway {
  /** Whether `url` is the MCP resource path (for a request to `baseUrl`). */
  serves(url: URL, baseUrl: string): boolean;
  /** Serves one request to the MCP resource path. */
  handle(ctx: GatewayContext): Promise<Response>;
}

/** One MCP server behind the gateway: its name, where it is, how it is reached. */
export interface ServedServer {
  /** `default` for the server at `/mcp`, else its MCP_SERVERS_FILE name (at `/mcp/<name>`). */
  name: string;
  url: URL;
  client: McpClient;
  tokenHeader: TokenHeader;
  timeoutMs: number;
  /** Its resource URL for a base URL. */
  resourceFor(baseUrl: string): string;
}

/**
 * The servers behind the gateway: MCP_UPSTREAM_URL's at `/mcp` (as `default`), and each of
 * MCP_SERVERS_FILE's at `/mcp/<name>`, with the service-wide settings where it names none.
 */
export function servedServers(
  deps: GatewayDeps & { serverClients: Readonly<Record<string, McpClient>> },
): ServedServer[] {
  const { config } = deps;
  const main: ServedServer[] = config.mcpUpstreamUrl && deps.mcpClient
    ? [{
      name: DEFAULT_SERVER,
      url: config.mcpUpstreamUrl,
      client: deps.mcpClient,
      tokenHeader: config.mcpUpstreamTokenHeader,
      timeoutMs: config.mcpUpstreamTimeoutMs,
      resourceFor: (baseUrl) => mcpResourceUrl(config, baseUrl),
    }]
    : [];
  const named = (config.mcpServersFile?.servers ?? []).map((entry): ServedServer => ({
    name: entry.name,
    url: entry.url,
    client: deps.serverClients[entry.name],
    tokenHeader: entry.tokenHeader ?? config.mcpUpstreamTokenHeader,
    timeoutMs: entry.timeoutMs ?? config.mcpUpstreamTimeoutMs,
    resourceFor: (baseUrl) => namedServerResource(baseUrl, entry.name),
  }));
  return [...main, ...named];
}

/** The gateway in front of `server`. */
export function createMcpGateway(deps: GatewayDeps, server: ServedServer): McpGateway {
  const gateway: Gateway = {
    deps,
    server: server.name,
    upstreamUrl: server.url,
    client: server.client,
    tokenHeader: server.tokenHeader,
    guard: undefined,
    deadlines: createDeadlines(server.timeoutMs),
    resourceFor: lastValueMemo(server.resourceFor),
    audit: createAudit(deps.logger, deps.config.auditLog, server.name),
    rateLimit: createSessionRateLimit(deps, deps.config.rateLimits.mcp),
  };
  const pathFor = lastValueMemo((baseUrl: string) =>
    trimPath(new URL(server.resourceFor(baseUrl)).pathname)
  );
  return {
    serves: (url, baseUrl) => trimPath(url.pathname) === pathFor(baseUrl),
    handle: (ctx) => runExchange(ctx, gateway),
  };
}

/**
 * `compute` remembering its last argument and result: the base URL is the same on every request
 * with BASE_URL set, and nearly always without it.
 */
function lastValueMemo<T>(compute: (key: string) => T): (key: string) => T {
  let last: { key: string; value: T } | undefined;
  return (key) => {
    if (last?.key !== key) last = { key, value: compute(key) };
    return last.value;
  };
}

function trimPath(pathname: string): string {
  return pathname.replace(/\/+$/, "") || "/";
}
