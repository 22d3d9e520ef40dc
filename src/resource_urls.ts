/**
 * Where the protected MCP server is, and where its metadata lives: what the metadata route,
 * the gateway and the resource guard all derive from the configuration and the base URL.
 *
 * @see RFC 9728 §3.1
 */

import type { Config } from "./config.ts";

/** The well-known path of protected resource metadata. */
export const PROTECTED_RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource";

/** The protected MCP resource: MCP_RESOURCE_URL, or `{base}/mcp`. */
export function mcpResourceUrl(config: Pick<Config, "mcpResourceUrl">, baseUrl: string): string {
  return config.mcpResourceUrl ?? `${baseUrl}/mcp`;
}

/** Where the protected resource metadata of `resource` lives (RFC 9728 §3.1). */
export function protectedResourceMetadataUrl(resource: string): string {
  const url = new URL(resource);
  return `${url.origin}${PROTECTED_RESOURCE_METADATA_PATH}${pathOf(resource)}`;
}

/** A URL's path without trailing slashes (`""` for the root). */
export function pathOf(url: string): string {
  return new URL(url).pathname.replace(/\/+$/, "");
}
