/**
 * Builds the fetch handler from explicit dependencies: finds the route, applies its rules
 * (CORS, rate limit, OAuth configuration), renders every error in one place, adds security
 * headers and writes one log line per request.
 */

import { clientIp, createPeerAddress, createProxyTrust } from "../http/client_ip.ts";
import { strictTransportSecurity } from "./config.ts";
import type { AppDeps, RequestContext } from "./context.ts";
import { crossOriginHeaders, preflight } from "../http/cors.ts";
import { notConfiguredError, notFound, OAuthError, storeUnavailableError } from "../http/errors.ts";
import { errorResponse, json, NO_STORE } from "../http/responses.ts";
import type { LogFields } from "../logger.ts";
import { enforceRateLimit } from "../http/rate_limit.ts";
import { createRequestOrigin } from "../http/request_origin.ts";
import { createLimitedClient } from "../http/limited_client.ts";
import { createUnconfiguredProxyWarning } from "../http/proxy_warning.ts";
import {
  findRoute,
  type Handler,
  methodNotAllowed,
  type Methods,
  type Route,
  type Routes,
  routesFor,
} from "./router.ts";
import { createMcpGateway } from "../gateway/proxy.ts";
import type { ServedServer } from "../servers/served_set.ts";
import type { McpClient } from "../gateway/mcp_client/types.ts";
import { gatewayRoute } from "./gateway_route.ts";
import { ROUTES } from "./route_table.ts";
import { StoreUnavailableError } from "../store/backend.ts";
import { routeLabels } from "./route_label.ts";

/** The handler `Deno.serve` runs. */
export type FetchHandler = (request: Request, info?: Deno.ServeHandlerInfo) => Promise<Response>;

const SECURITY_HEADERS: readonly [string, string][] = [
  ["X-Content-Type-Options", "nosniff"],
  ["X-Frame-Options", "DENY"],
  ["Referrer-Policy", "no-referrer"],
];
const SECURITY_HEADER_NAMES: ReadonlySet<string> = new Set(SECURITY_HEADERS.map(([name]) => name));

/** Creates the service's request handler. */
export function createApp(deps: AppDeps): FetchHandler {
  const gatewayRouteFor = gatewayRoutes(deps);
  const trusted = createProxyTrust(deps.config.trustProxy);
  const trustsProxies = deps.config.trustProxy.length > 0;
  const limitedClientOf = createLimitedClient(deps.config);
  const peerAddress = createPeerAddress();
  const hsts = strictTransportSecurity(deps.config);
  const routes = routesFor(ROUTES, deps.config);
  const routeLabel = routeLabels(routes);
  const basePath = basePathOf(deps.config.baseUrl);
  const warnUnconfiguredProxy = createUnconfiguredProxyWarning(trustsProxies, deps.logger);
  const requestOrigin = createRequestOrigin();
  return async (request, info) => {
    const started = performance.now();
    const requestId = crypto.randomUUID();
    const logFields: LogFields = {};
    let route: Route | undefined;
    let path: string | undefined;
    let response: Response;
    try {
      // Parsed only when needed: most requests never ask where they came from.
      let peer: string | undefined;
      const peerOf = () => peer ??= peerAddress(info);
      const fromTrustedProxy = trustsProxies && trusted(peerOf());
      warnUnconfiguredProxy(request.headers, peerOf);
      // Everything the Host header shapes is inside the try: a malformed one is a 400.
      const { url, baseUrl } = requestOrigin(request, deps.config.baseUrl, fromTrustedProxy);
      path = url.pathname;
      route = gatewayRouteFor(url, baseUrl) ?? fixedRoute(routes, url.pathname, basePath);
      let client: string | undefined;
      const clientAddress = () => client ??= clientIp(request, peerOf(), trusted);
      const limitedClient = () => limitedClientOf(clientAddress());
      const found = route;
      const standardHeaders = () => standardHeadersOf(found, requestId, hsts);
      const ctx = {
        request,
        url,
        baseUrl,
        deps,
        requestId,
        startedMs: started,
        logFields,
        clientAddress,
        limitedClient,
        standardHeaders,
      };
      // The route's database time, in all, is bounded by DATABASE_TIMEOUT_MS (store/deadline.ts).
      response = await deps.store.withDeadline(() => dispatch(found, ctx));
    } catch (error) {
      response = renderError(error, deps, requestId);
    }
    response = withHeaders(response, route, requestId, hsts);
    const elapsedMs = performance.now() - started;
    deps.metrics.observeRequest(routeLabel(route), response.status, elapsedMs);
    deps.logger.info("request", {
      requestId,
      method: request.method,
      path,
      status: response.status,
      ms: Math.round(elapsedMs * 10) / 10,
      ...logFields,
    });
    return response;
  };
}

/**
 * The gateway's route for a request's path, if an MCP server is served there now: one lookup in
 * the served set (a reload of MCP_SERVERS_FILE changes what it finds), and each server's gateway
 * built on its first request and kept as long as the server is.
 */
function gatewayRoutes(deps: AppDeps): (url: URL, baseUrl: string) => Route | undefined {
  const routes = new WeakMap<ServedServer<McpClient>, Route>();
  return (url, baseUrl) => {
    const server = deps.servers.at(url, baseUrl);
    if (server === undefined) return undefined;
    let route = routes.get(server);
    if (route === undefined) {
      route = gatewayRoute(createMcpGateway(deps, server));
      routes.set(server, route);
    }
    return route;
  };
}

/** BASE_URL's path without trailing slashes; `""` without one. */
function basePathOf(baseUrl: string | undefined): string {
  return baseUrl === undefined ? "" : new URL(baseUrl).pathname.replace(/\/+$/, "");
}

/**
 * The fixed endpoint at `pathname`. They are advertised under BASE_URL's path
 * (`{BASE_URL}/token`), as the gateway's resource is, so they answer there; and at the root, for
 * a proxy that strips that path, which goes first: with BASE_URL `https://x/oauth` such a proxy
 * sends `/oauth/poll` for the poll, which is no endpoint once stripped again.
 */
function fixedRoute(routes: Routes, pathname: string, basePath: string): Route | undefined {
  const route = findRoute(routes, pathname);
  if (route !== undefined || basePath === "") return route;
  if (pathname === basePath) return findRoute(routes, "/");
  return pathname.startsWith(`${basePath}/`)
    ? findRoute(routes, pathname.slice(basePath.length))
    : undefined;
}

/** The route's rules in order: 404, CORS preflight, 405, rate limit, OAuth configuration. */
async function dispatch(route: Route | undefined, ctx: RequestContext): Promise<Response> {
  const { request, url, deps } = ctx;
  if (!route) throw notFound(url.pathname);
  if (route.cors && request.method === "OPTIONS") {
    const requested = request.headers.get("access-control-request-headers");
    return preflight(route.cors, Object.keys(route.methods), requested);
  }
  const handle = handlerFor(route, request.method);
  if (route.rateLimit) {
    await enforceRateLimit(deps, route.rateLimit, ctx.limitedClient());
  }
  return await handle(ctx);
}

/**
 * The route's handler for `method` (else the 405); for a route that needs OAuth configuration,
 * wrapped so that it runs only with it, and is handed it.
 */
function handlerFor(route: Route, method: string): Handler<RequestContext> {
  if (!route.oauth) {
    const handler = methodOf(route.methods, method);
    if (handler) return handler;
  } else {
    const handler = methodOf(route.methods, method);
    const bare = route.bareNotConfigured;
    if (handler) {
      return (ctx) =>
        ctx.deps.oauth ? handler({ ...ctx, oauth: ctx.deps.oauth }) : notConfigured(bare);
    }
  }
  throw methodNotAllowed(route, method);
}

function methodOf<C>(methods: Methods<C>, method: string): Handler<C> | undefined {
  return Object.hasOwn(methods, method) ? methods[method] : undefined;
}

/** Spec §7: 500 `server_error` "OAuth not configured"; only `{error}` where the spec says so. */
function notConfigured(bare: boolean | undefined): Promise<Response> {
  if (bare) return Promise.resolve(json({ error: "server_error" }, 500, NO_STORE));
  throw notConfiguredError();
}

/** The standard headers of a route's answers, as one list (see RequestContext). */
function standardHeadersOf(
  route: Route | undefined,
  requestId: string,
  hsts: string | undefined,
): [string, string][] {
  const headers: [string, string][] = [...SECURITY_HEADERS];
  if (hsts) headers.push(["Strict-Transport-Security", hsts]);
  headers.push(["X-Request-Id", requestId]);
  if (route?.cors) headers.push(...crossOriginHeaders(route.cors));
  return headers;
}

/** Adds the standard headers to `response`, unless its route included them already. */
function withHeaders(
  response: Response,
  route: Route | undefined,
  requestId: string,
  hsts: string | undefined,
): Response {
  const headers = response.headers;
  if (headers.get("X-Request-Id") === requestId) return response;
  for (const [name, value] of standardHeadersOf(route, requestId, hsts)) {
    // A route's own security header (a page's framing policy) stands; the rest are the app's.
    if (!SECURITY_HEADER_NAMES.has(name) || !headers.has(name)) headers.set(name, value);
  }
  return response;
}

function renderError(error: unknown, deps: AppDeps, requestId: string): Response {
  if (error instanceof OAuthError) return errorResponse(error);
  if (error instanceof StoreUnavailableError) {
    deps.logger.error("store unavailable", { requestId, error: error.message });
    return errorResponse(storeUnavailableError());
  }
  deps.logger.error("unhandled error", {
    requestId,
    error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
  });
  return errorResponse(new OAuthError(500, "server_error", "Internal server error"));
}
