/**
 * The route table's shape and lookup: exact paths, or prefixes ending in `/*`, each with its
 * per-method handlers and its rules (OAuth configuration needed, rate-limit bucket, CORS);
 * 404, and 405 with `Allow`.
 */

import type { OAuthRequestContext, RequestContext } from "./context.ts";
import type { CorsPolicy } from "../http/cors.ts";
import { OAuthError } from "../http/errors.ts";
import type { Config, RateLimits } from "./config.ts";

/** Which limit a route counts against (the route table says). */
export type RateLimitBucket = keyof RateLimits;

/** A route handler. */
export type Handler<C> = (ctx: C) => Promise<Response>;

/** Handlers by HTTP method. */
export type Methods<C> = Partial<Record<string, Handler<C>>>;

/** What the app does around a route's handler. */
export interface RouteRules {
  /** The per-client-IP limit this route counts against. */
  rateLimit?: RateLimitBucket;
  /** Answer CORS preflights and allow any origin, without credentials. */
  cors?: CorsPolicy;
  /** The route exists only in the configurations this admits (else 404). */
  when?: (config: Config) => boolean;
}

/**
 * One path's handlers and rules. A route that needs OAuth configuration gets a context whose
 * OAuth dependencies are never missing; without them the app answers spec §7's 500 for it.
 */
export type Route =
  & RouteRules
  & (
    | {
      oauth: true;
      methods: Methods<OAuthRequestContext>;
      /** Spec §7: `/oauth/poll` answers only `{error: "server_error"}` when not configured. */
      bareNotConfigured?: boolean;
    }
    | { oauth?: false; methods: Methods<RequestContext> }
  );

/** Path (or `prefix/*`) → route. */
export type Routes = Record<string, Route>;

/** The routes that exist in `config`: those without a `when` rule, or whose rule admits it. */
export function routesFor(routes: Routes, config: Config): Routes {
  return Object.fromEntries(
    Object.entries(routes).filter(([, route]) => route.when?.(config) ?? true),
  );
}

/** The route for a path, exact match first, then the longest `prefix/*`; undefined if none. */
export function findRoute(routes: Routes, pathname: string): Route | undefined {
  if (Object.hasOwn(routes, pathname)) return routes[pathname];
  let best: string | undefined;
  for (const key of Object.keys(routes)) {
    if (!key.endsWith("/*")) continue;
    const prefix = key.slice(0, -1);
    if (pathname.startsWith(prefix) && (!best || key.length > best.length)) best = key;
  }
  return best ? routes[best] : undefined;
}

/** The 405 for a method the route does not serve, with `Allow`. */
export function methodNotAllowed(route: Route, method: string): OAuthError {
  const allow = [...Object.keys(route.methods), ...(route.cors ? ["OPTIONS"] : [])].join(", ");
  return new OAuthError(405, "invalid_request", `Method ${method} not allowed; use ${allow}`, {
    Allow: allow,
  });
}
