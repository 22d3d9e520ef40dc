/** Which client reaches the MCP server at a given MCP_UPSTREAM_URL. */

import { createFetchClient } from "./fetch_client.ts";
import { createNodeHttpClient } from "./node_http_client.ts";
import type { McpClient } from "./types.ts";

/**
 * The variables that send Deno's `fetch` to a proxy for an `http:` URL (its `NO_PROXY` may
 * still exempt the host).
 */
const PLAIN_HTTP_PROXY_VARIABLES = ["ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"];

/**
 * `node:http` for a plain `http:` MCP server (the usual neighbour on the same host or network;
 * a sixth less of the gateway's CPU per call than `fetch`: bench/README.md), `fetch` for
 * `https:`, and for `http:` too when `env` names a proxy for it: `node:http` knows no proxy, and
 * `fetch` applies the proxy and `NO_PROXY` exactly as it does for every other request.
 */
export function mcpClientFor(
  url: URL,
  env: Readonly<Record<string, string | undefined>> = {},
): McpClient {
  return url.protocol === "http:" && !namesPlainHttpProxy(env)
    ? createNodeHttpClient()
    : createFetchClient();
}

function namesPlainHttpProxy(env: Readonly<Record<string, string | undefined>>): boolean {
  return PLAIN_HTTP_PROXY_VARIABLES.some((name) => (env[name] ?? "").trim() !== "");
}
