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

import { createAudit } from "./audit.ts";
import { createDeadlines } from "./deadlines.ts";
import type { Gateway, GatewayDeps } from "./deps.ts";
import { type GatewayContext, runExchange } from "./exchange.ts";
import { createSessionRateLimit } from "./session_rate_limit.ts";
import type { McpClient } from "./mcp_client/types.ts";
import type { ServedServer } from "../servers/served_set.ts";

/** The gateway as the app sees it. */
export interface McpGateway {
  /** Serves one request to the MCP server's path. */
  handle(ctx: GatewayContext): Promise<Response>;
}

/** The gateway in front of `server`. */
export function createMcpGateway(deps: GatewayDeps, server: ServedServer<McpClient>): McpGateway {
  const gateway: Gateway = {
    deps,
    server: server.name,
    upstreamUrl: server.url,
    client: server.client,
    tokenHeader: server.tokenHeader,
    guard: undefined,
    deadlines: createDeadlines(server.timeoutMs),
    resourceFor: server.resourceFor,
    audit: createAudit(deps.logger, deps.config.auditLog, server.name),
    rateLimit: createSessionRateLimit(deps, deps.config.rateLimits.mcp),
    ownPolicy: server.entry?.policy?.policy,
    ownLists: server.entry?.lists,
  };
  return { handle: (ctx) => runExchange(ctx, gateway) };
}
