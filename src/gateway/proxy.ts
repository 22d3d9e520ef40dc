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

import { mcpResourceUrl } from "../http/resource.ts";
import { createAudit } from "./audit.ts";
import { createDeadlines } from "./deadlines.ts";
import type { Gateway, GatewayDeps } from "./deps.ts";
import { type GatewayContext, runExchange } from "./exchange.ts";
import { createSessionRateLimit } from "./session_rate_limit.ts";

/** The gateway as the app sees it. */
export interface McpGateway {
  /** Whether `url` is the MCP resource path (for a request to `baseUrl`). */
  serves(url: URL, baseUrl: string): boolean;
  /** Serves one request to the MCP resource path. */
  handle(ctx: GatewayContext): Promise<Response>;
}

/** The gateway over `deps`, or undefined when MCP_UPSTREAM_URL is not configured. */
export function createMcpGateway(deps: GatewayDeps): McpGateway | undefined {
  const upstreamUrl = deps.config.mcpUpstreamUrl;
  const client = deps.mcpClient;
  if (!upstreamUrl || !client) return undefined;
  const gateway: Gateway = {
    deps,
    upstreamUrl,
    client,
    guard: undefined,
    deadlines: createDeadlines(deps.config.mcpUpstreamTimeoutMs),
    resourceFor: lastValueMemo((baseUrl) => mcpResourceUrl(deps.config, baseUrl)),
    audit: createAudit(deps.logger, deps.config.auditLog),
    rateLimit: createSessionRateLimit(deps, deps.config.rateLimits.mcp),
  };
  const pathFor = lastValueMemo((baseUrl: string) => resourcePath(deps, baseUrl));
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

/** The path of the MCP resource URL (which may be on another host). */
function resourcePath(deps: GatewayDeps, baseUrl: string): string {
  return trimPath(new URL(mcpResourceUrl(deps.config, baseUrl)).pathname);
}

function trimPath(pathname: string): string {
  return pathname.replace(/\/+$/, "") || "/";
}
