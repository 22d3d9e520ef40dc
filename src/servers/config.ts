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
import { type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import { parseServersFile } from "./file.ts";

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
