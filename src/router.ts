/**
 * A small route table: exact paths, or prefixes ending in `/*`, to per-method handlers; 404,
 * and 405 with `Allow`.
 */

import { OAuthError } from "./errors.ts";

/** A route handler. */
export type Handler<C> = (ctx: C) => Promise<Response>;

/** One path's handlers, and whether browsers on other origins may call it. */
export interface Route<C> {
  methods: Partial<Record<string, Handler<C>>>;
  /** Answer CORS preflights and allow any origin, without credentials. */
  cors?: boolean;
}

/** Path (or `prefix/*`) → route. */
export type Routes<C> = Record<string, Route<C>>;

/** The route for a path, exact match first, then the longest `prefix/*`; undefined if none. */
export function findRoute<C>(routes: Routes<C>, pathname: string): Route<C> | undefined {
  if (Object.hasOwn(routes, pathname)) return routes[pathname];
  let best: string | undefined;
  for (const key of Object.keys(routes)) {
    if (!key.endsWith("/*")) continue;
    const prefix = key.slice(0, -1);
    if (pathname.startsWith(prefix) && (!best || key.length > best.length)) best = key;
  }
  return best ? routes[best] : undefined;
}

/** The handler for `method` on a route, or the 405 OAuthError with `Allow`. */
export function methodHandler<C>(route: Route<C>, method: string): Handler<C> {
  const handler = Object.hasOwn(route.methods, method) ? route.methods[method] : undefined;
  if (handler) return handler;
  const allow = [...Object.keys(route.methods), ...(route.cors ? ["OPTIONS"] : [])].join(", ");
  throw new OAuthError(405, "invalid_request", `Method ${method} not allowed; use ${allow}`, {
    Allow: allow,
  });
}

/** The 404 for a path no route serves. */
export function notFound(pathname: string): OAuthError {
  return new OAuthError(404, "invalid_request", `No endpoint at ${pathname}`);
}
