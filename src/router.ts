/** A small route table: exact paths to per-method handlers; 404 and 405 with `Allow`. */

import { OAuthError } from "./errors.ts";

/** A route handler. */
export type Handler<C> = (ctx: C) => Promise<Response>;

/** Path → method → handler. */
export type Routes<C> = Record<string, Partial<Record<string, Handler<C>>>>;

/** Finds the handler for a request, or throws the 404/405 OAuthError. */
export function route<C>(routes: Routes<C>, method: string, pathname: string): Handler<C> {
  const methods = Object.hasOwn(routes, pathname) ? routes[pathname] : undefined;
  if (!methods) throw new OAuthError(404, "invalid_request", `No endpoint at ${pathname}`);
  const handler = methods[method];
  if (handler) return handler;
  const allow = Object.keys(methods).join(", ");
  throw new OAuthError(405, "invalid_request", `Method ${method} not allowed; use ${allow}`, {
    Allow: allow,
  });
}
