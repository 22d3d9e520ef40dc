/** Which client reaches the MCP server at a given MCP_UPSTREAM_URL. */

import { createFetchClient } from "./fetch_client.ts";
import { createNodeHttpClient } from "./node_http_client.ts";
import type { McpClient } from "./types.ts";

/**
 * `node:http` for a plain `http:` MCP server (the usual neighbour on the same host or network;
 * a sixth less of the gateway's CPU per call than `fetch`: bench/README.md), `fetch` for
 * `https:`.
 */
export function mcpClientFor(url: URL): McpClient {
  return url.protocol === "http:" ? createNodeHttpClient() : createFetchClient();
}
