/**
 * The `route` label of a request: the route table's key of the route that served it (`/token`,
 * `/.well-known/oauth-authorization-server/*`), `mcp` for the gateway, `unknown` when no route
 * did. Never the request's path, whose values have no bound.
 */

import type { Route, Routes } from "./router.ts";
import { MCP_ROUTE, UNKNOWN_ROUTE } from "../metrics/catalog.ts";

/** The labeller for the routes of `routes`; any other route is the gateway's. */
export function routeLabels(routes: Routes): (route: Route | undefined) => string {
  const labels = new Map<Route, string>();
  for (const [key, route] of Object.entries(routes)) if (!labels.has(route)) labels.set(route, key);
  return (route) => route === undefined ? UNKNOWN_ROUTE : labels.get(route) ?? MCP_ROUTE;
}
