/**
 * Builds the fetch handler from explicit dependencies: the route table, CORS for the
 * endpoints browsers call cross-origin, the one place errors are rendered, security headers
 * and one log line per request.
 */

import { clientIp } from "./client_ip.ts";
import { type AppDeps, deriveBaseUrl, type RequestContext } from "./context.ts";
import { OAuthError } from "./errors.ts";
import { errorResponse } from "./http.ts";
import type { LogFields } from "./logger.ts";
import { enforceRateLimit, RATE_LIMITED_PATHS } from "./rate_limit.ts";
import { findRoute, methodHandler, notFound, type Route, type Routes } from "./router.ts";
import { handleAuthorize } from "./routes/authorize.ts";
import {
  handleAuthorizationServerMetadata,
  handleProtectedResourceMetadata,
} from "./routes/metadata.ts";
import { handleHealth } from "./routes/health.ts";
import { handleHome } from "./routes/home.ts";
import { createMcpGateway } from "./routes/mcp_gateway.ts";
import { handlePoll } from "./routes/poll.ts";
import { handleRegister } from "./routes/register.ts";
import { handleRevoke } from "./routes/revoke.ts";
import { handleToken } from "./routes/token.ts";

/** The handler `Deno.serve` runs. */
export type FetchHandler = (request: Request, info?: Deno.ServeHandlerInfo) => Promise<Response>;

/** The fixed endpoints; in gateway mode the MCP resource path (derived per request) comes first. */
const routes: Routes<RequestContext> = {
  "/": { methods: { GET: handleHome } },
  "/healthz": { methods: { GET: handleHealth } },
  "/authorize": { methods: { GET: handleAuthorize } },
  "/oauth/poll": { methods: { GET: handlePoll } },
  "/token": { methods: { POST: handleToken }, cors: true },
  "/register": { methods: { POST: handleRegister }, cors: true },
  "/revoke": { methods: { POST: handleRevoke }, cors: true },
  "/.well-known/oauth-authorization-server": {
    methods: { GET: handleAuthorizationServerMetadata },
    cors: true,
  },
  "/.well-known/oauth-authorization-server/*": {
    methods: { GET: handleAuthorizationServerMetadata },
    cors: true,
  },
  "/.well-known/oauth-protected-resource": {
    methods: { GET: handleProtectedResourceMetadata },
    cors: true,
  },
  "/.well-known/oauth-protected-resource/*": {
    methods: { GET: handleProtectedResourceMetadata },
    cors: true,
  },
};

const SECURITY_HEADERS = {
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  "Referrer-Policy": "no-referrer",
} as const;

/** What MCP clients send cross-origin (MCP authorization spec, RFC 6750). */
const CORS_ALLOW_HEADERS = "Content-Type, Authorization, MCP-Protocol-Version";
const CORS_MAX_AGE_SECONDS = "86400";

/** Creates the service's request handler. */
export function createApp(deps: AppDeps): FetchHandler {
  const gateway = createMcpGateway(deps);
  return async (request, info) => {
    const started = performance.now();
    const requestId = crypto.randomUUID();
    const url = new URL(request.url);
    const baseUrl = deriveBaseUrl(request, url, deps.config);
    const route = gateway?.route(url, baseUrl) ?? findRoute(routes, url.pathname);
    const logFields: LogFields = {};
    let response: Response;
    try {
      const ctx = { request, url, baseUrl, deps, requestId, logFields };
      response = await dispatch(route, ctx, peerAddress(info));
    } catch (error) {
      response = renderError(error, deps, requestId);
    }
    response = withHeaders(response, route, requestId);
    deps.logger.info("request", {
      requestId,
      method: request.method,
      path: url.pathname,
      status: response.status,
      ms: Math.round((performance.now() - started) * 10) / 10,
      ...logFields,
    });
    return response;
  };
}

async function dispatch(
  route: Route<RequestContext> | undefined,
  ctx: RequestContext,
  peer: string | undefined,
): Promise<Response> {
  const { request, url, deps } = ctx;
  if (!route) throw notFound(url.pathname);
  if (route.cors && request.method === "OPTIONS") return preflight(route);
  const handler = methodHandler(route, request.method);
  const bucket = Object.hasOwn(RATE_LIMITED_PATHS, url.pathname)
    ? RATE_LIMITED_PATHS[url.pathname]
    : undefined;
  if (bucket) {
    await enforceRateLimit(deps, bucket, clientIp(request, peer, deps.config.trustProxy));
  }
  return await handler(ctx);
}

function peerAddress(info: Deno.ServeHandlerInfo | undefined): string | undefined {
  const address = info?.remoteAddr;
  return address && "hostname" in address ? address.hostname : undefined;
}

function preflight(route: Route<RequestContext>): Response {
  return new Response(null, {
    status: 204,
    headers: {
      "Access-Control-Allow-Methods": [...Object.keys(route.methods), "OPTIONS"].join(", "),
      "Access-Control-Allow-Headers": CORS_ALLOW_HEADERS,
      "Access-Control-Max-Age": CORS_MAX_AGE_SECONDS,
    },
  });
}

function withHeaders(
  response: Response,
  route: Route<RequestContext> | undefined,
  requestId: string,
): Response {
  const headers = response.headers;
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) {
    if (!headers.has(name)) headers.set(name, value);
  }
  headers.set("X-Request-Id", requestId);
  if (route?.cors) {
    headers.set("Access-Control-Allow-Origin", "*");
    headers.set("Access-Control-Expose-Headers", "WWW-Authenticate");
  }
  return response;
}

function renderError(error: unknown, deps: AppDeps, requestId: string): Response {
  if (error instanceof OAuthError) return errorResponse(error);
  deps.logger.error("unhandled error", {
    requestId,
    error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
  });
  return errorResponse(new OAuthError(500, "server_error", "Internal server error"));
}
