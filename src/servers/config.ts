/**
 * The MCP servers the service serves: the one at `/mcp` (MCP_UPSTREAM_URL, the resource it is
 * (MCP_RESOURCE_URL), how it is reached) and the named ones of MCP_SERVERS_FILE, whose entries
 * default to `/mcp`'s token header and time limit.
 */

import {
  caseInsensitive,
  integerBetween,
  oneOf,
  parseHttpUrlWithQuery,
  urlWithoutTrailingSlash,
} from "../config/parsers.ts";
import { ConfigError, type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import { PATHS } from "../http/paths.ts";
import { parseServersFile, type ServersFile } from "./file.ts";

export const SERVERS_VARIABLES = {
  /**
   * The protected MCP resource (RFC 9728 `resource`), without a trailing slash. Undefined:
   * `{base}/mcp`, derived like the issuer.
   */
  mcpResourceUrl: variable(
    "MCP_RESOURCE_URL",
    undefined,
    urlWithoutTrailingSlash,
    "the protected MCP server (RFC 9728 `resource`)",
    "`{base}/mcp`",
  ),
  /**
   * More MCP servers, each behind `/mcp/<name>` with its own audience; read at start-up, again on
   * SIGHUP and when the file changes (src/app/file_reloads.ts). Undefined: none.
   */
  mcpServersFile: variable(
    "MCP_SERVERS_FILE",
    undefined,
    parseServersFile,
    "more MCP servers, each at `/mcp/<name>` (YAML or JSON; [several servers](#several-mcp-servers))",
  ),
  /** Gateway mode: where authenticated MCP requests are forwarded. Undefined: no gateway. */
  mcpUpstreamUrl: variable(
    "MCP_UPSTREAM_URL",
    undefined,
    parseHttpUrlWithQuery,
    "gateway mode: where authenticated MCP requests go",
  ),
  /** How the gateway hands the MCP server the user's GitLab token. */
  mcpUpstreamTokenHeader: variable(
    "MCP_UPSTREAM_TOKEN_HEADER",
    "authorization",
    caseInsensitive(oneOf("authorization", "private-token")),
    "gateway: `private-token` sends `PRIVATE-TOKEN` instead of a Bearer",
  ),
  /** How long the gateway waits for the MCP server's response headers. */
  mcpUpstreamTimeoutMs: variable(
    "MCP_UPSTREAM_TIMEOUT_MS",
    "30000",
    integerBetween(1, 3_600_000),
    "gateway: time limit for the MCP server's response headers",
  ),
} satisfies ConfigTable;

/** What SERVERS_VARIABLES reads to. */
export type ServersConfig = ValuesOf<typeof SERVERS_VARIABLES>;

/**
 * No named server is served where MCP_RESOURCE_URL puts `/mcp`'s: the path of that URL is looked
 * up first (servers/served_set.ts), so `/mcp`'s server would answer the named one's requests and
 * metadata, and its resource would stand for both. Paths compare without trailing slashes and
 * whatever their case (a name is lower-case only; two servers a letter's case apart would be
 * one to whatever folds case on the way), at start-up and on every reload of the file.
 */
export function requireDistinctServerPaths(
  config: { baseUrl?: string; mcpResourceUrl?: string },
  file: Pick<ServersFile, "path" | "servers">,
): void {
  if (config.mcpResourceUrl === undefined) return;
  const mainPath = comparablePath(config.mcpResourceUrl);
  const basePath = config.baseUrl === undefined ? "" : comparablePath(config.baseUrl);
  const entry = file.servers.find(({ name }) => `${basePath}/mcp/${name}` === mainPath);
  if (entry === undefined) return;
  throw new ConfigError(
    SERVERS_VARIABLES.mcpServersFile.name,
    `${file.path}: server ${entry.name}: its path is the path of ` +
      `${SERVERS_VARIABLES.mcpResourceUrl.name} (${config.mcpResourceUrl}), where /mcp's server ` +
      `answers; rename the server or change ${SERVERS_VARIABLES.mcpResourceUrl.name}`,
  );
}

/** A URL's path without trailing slashes, in lower case (`""` for the root). */
function comparablePath(url: string): string {
  return new URL(url).pathname.replace(/\/+$/, "").toLowerCase();
}

/**
 * MCP_RESOURCE_URL's path is free (start-up rules): none of the service's endpoints is there,
 * and none of MCP_SERVERS_FILE's servers.
 */
export function requireFreeResourcePath(config: ServersConfig & { baseUrl?: string }): void {
  requireResourceOffEndpoints(config);
  if (config.mcpServersFile) requireDistinctServerPaths(config, config.mcpServersFile);
}

/**
 * MCP_RESOURCE_URL's path is none of the service's own endpoints (at the root or under
 * BASE_URL's path, where they answer too): it is looked up first, so `/mcp`'s server would take
 * over `/token` or `/healthz`. The root stays allowed: an MCP server alone on its host.
 */
function requireResourceOffEndpoints(config: { baseUrl?: string; mcpResourceUrl?: string }) {
  if (config.mcpResourceUrl === undefined) return;
  const mainPath = comparablePath(config.mcpResourceUrl);
  const basePath = config.baseUrl === undefined ? "" : comparablePath(config.baseUrl);
  const endpoint = Object.values(PATHS).find((path) =>
    path !== PATHS.home && [path, `${basePath}${path}`].includes(mainPath)
  );
  if (endpoint === undefined) return;
  throw new ConfigError(
    SERVERS_VARIABLES.mcpResourceUrl.name,
    `its path is the service's own ${endpoint}, which /mcp's server would take over; ` +
      "choose another path (the default is {base}/mcp)",
  );
}
