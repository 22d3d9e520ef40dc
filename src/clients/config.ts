/**
 * Which clients and redirect URIs are accepted (REDIRECT_URI_POLICY, ALLOWED_REDIRECT_URIS), and
 * where Client ID Metadata Documents may be fetched from.
 */

import { oneOf, parseBoolean } from "../config/parsers.ts";
import { ConfigError, type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import { redirectPatternProblem } from "./redirect_allow_list.ts";

export function parseRedirectPatterns(name: string, raw: string): string[] {
  const patterns = raw.split(",").map((item) => item.trim()).filter((item) => item !== "");
  for (const pattern of patterns) {
    const problem = redirectPatternProblem(pattern);
    if (problem) throw new ConfigError(name, `${JSON.stringify(pattern)}: ${problem}`);
  }
  if (patterns.length === 0) throw new ConfigError(name, "lists no redirect URI");
  return patterns;
}

export const CLIENTS_VARIABLES = {
  /** `any`: the spec's behaviour; `registered`: redirect URIs must be registered (RFC 7591). */
  redirectUriPolicy: variable(
    "REDIRECT_URI_POLICY",
    "any",
    oneOf("any", "registered"),
    "`registered`: only registered clients and their redirect URIs ([why](#redirect-uri-policy))",
    "`any` (strict: `registered`)",
  ),
  /** Redirect URI patterns every client must use; undefined: any (the spec). */
  allowedRedirectUris: variable(
    "ALLOWED_REDIRECT_URIS",
    undefined,
    parseRedirectPatterns,
    "comma list of redirect URIs clients may use ([allow-list](#client-allow-list))",
    "any",
  ),
  /** Lifts the SSRF guard on metadata document fetches (intranets, tests). */
  clientMetadataAllowPrivate: variable(
    "CLIENT_METADATA_ALLOW_PRIVATE",
    "false",
    parseBoolean,
    "fetch metadata documents from private addresses too ([CIMD](#client-id-metadata-documents))",
  ),
} satisfies ConfigTable;

/** What CLIENTS_VARIABLES reads to. */
export type ClientsConfig = ValuesOf<typeof CLIENTS_VARIABLES>;
