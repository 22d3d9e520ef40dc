/**
 * The gateway's route: the methods it forwards (OPTIONS is answered by the app as a CORS
 * preflight), OAuth configuration needed, MCP's CORS policy.
 */

import type { McpGateway } from "../gateway/proxy.ts";
import { MCP_CORS } from "../http/cors.ts";
import type { OAuthRequestContext } from "./context.ts";
import type { Route } from "./router.ts";

/** Methods forwarded to the MCP server. */
const FORWARDED_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] as const;

/** The route of the MCP resource path. */
export function gatewayRoute(gateway: McpGateway): Route {
  const handler = (ctx: OAuthRequestContext) => gateway.handle(ctx);
  return {
    methods: Object.fromEntries(FORWARDED_METHODS.map((method) => [method, handler])),
    oauth: true,
    cors: MCP_CORS,
  };
}
