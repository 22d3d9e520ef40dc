/**
 * The protected MCP resources: where they are and where their metadata lives (what the metadata
 * route, the gateway and the resource guard derive from the configuration and the base URL), and
 * the resource-indicator rules: a client may ask a token only for a served `resource`, and tokens
 * name it so that another MCP server refuses them.
 *
 * @see RFC 9728 §3.1, RFC 8707 §2, MCP authorization spec ("Resource Parameter Implementation")
 */

import { OAuthError } from "./errors.ts";
import { PATHS } from "./paths.ts";

/** The protected MCP resource: MCP_RESOURCE_URL, or `{base}/mcp`. */
export function mcpResourceUrl(config: { mcpResourceUrl?: string }, baseUrl: string): string {
  return config.mcpResourceUrl ?? `${baseUrl}/mcp`;
}

/**
 * Where the protected resource metadata of `resource` lives (RFC 9728 §3.1): its path inserted
 * as spelled, a trailing slash kept (`…/mcp/`'s is not `…/mcp`'s: §3.3 compares them exactly).
 */
export function protectedResourceMetadataUrl(resource: string): string {
  const url = new URL(resource);
  const path = pathOf(resource) === "" ? "" : url.pathname.replace(/\/+$/, "/");
  return `${url.origin}${PATHS.protectedResourceMetadata}${path}`;
}

/**
 * `resource` as a request to it spelled it: with a trailing slash when its path had one (a
 * client at `…/mcp/`), which the metadata and challenges repeat so that a client comparing the
 * metadata's `resource` with the URL it used (RFC 9728 §3.3) finds it. It names the same server:
 * sameResource ignores the slash, and tokens name the resource without it.
 */
export function resourceAsRequested(resource: string, requestPath: string): string {
  return requestPath.endsWith("/") && pathOf(resource) !== "" ? `${resource}/` : resource;
}

/** A URL's path without trailing slashes (`""` for the root). */
export function pathOf(url: string): string {
  return new URL(url).pathname.replace(/\/+$/, "");
}

/**
 * Whether two resource URLs name the same thing: the URL parser lowercases scheme and host and
 * drops a default port; trailing slashes of the path are ignored; the rest compares exactly.
 */
export function sameResource(a: string, b: string): boolean {
  const left = normalised(a);
  return left !== undefined && left === normalised(b);
}

/** 400 `invalid_target`. */
export function invalidTarget(description: string): OAuthError {
  return new OAuthError(400, "invalid_target", description);
}

function normalised(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  if (url.hash || url.username || url.password) return undefined;
  return `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}${url.search}`;
}

/** The resource URL of the MCP server named `name` (MCP_SERVERS_FILE): `{base}/mcp/<name>`. */
export function namedServerResource(baseUrl: string, name: string): string {
  return `${baseUrl}/mcp/${name}`;
}

/**
 * The served resource a request names: the first (`/mcp`'s) when `requested` is absent, the one
 * it names (as sameResource compares) otherwise; else 400 `invalid_target`.
 */
export function requireServedResource(
  requested: string | undefined,
  served: readonly string[],
): string {
  if (requested === undefined) return served[0];
  if (requested.includes("#")) throw invalidTarget("resource must not contain a fragment");
  const found = served.find((resource) => sameResource(requested, resource));
  if (found === undefined) {
    throw invalidTarget(
      served.length === 1
        ? "resource is not the MCP server this service protects"
        : "resource is not one of the MCP servers this service protects",
    );
  }
  return found;
}
