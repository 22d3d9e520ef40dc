/**
 * The identity provider and our application there (GITLAB_*, UPSTREAM_PROVIDER), and the time
 * limit of every call to it.
 */

import { caseInsensitive, integerBetween, oneOf, parseHttpUrl, text } from "../config/parsers.ts";
import { secret } from "../config/secret_files.ts";
import { ConfigError, type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";

/** A provider's name as `providers.ts` keys it: lower case, digits, `_` and `-`. */
function providerName(name: string, raw: string): string {
  if (!/^[a-z][a-z0-9_-]{0,31}$/.test(raw)) {
    throw new ConfigError(name, "must be a provider's name, e.g. gitlab");
  }
  return raw;
}

export const UPSTREAM_VARIABLES = {
  /** The upstream identity provider and our application there. */
  upstream: {
    /** Absent: as jwtSecret. */
    clientId: variable("GITLAB_CLIENT_ID", undefined, text, "GitLab OAuth application id"),
    url: variable(
      "GITLAB_URL",
      "https://gitlab.com",
      parseHttpUrl,
      "GitLab instance (self-hosted too, with or without a sub-path)",
    ),
    scopes: variable("GITLAB_SCOPES", "api", text, "scopes asked of GitLab"),
    /** Which provider of `src/upstream/providers.ts` signs users in. */
    provider: variable(
      "UPSTREAM_PROVIDER",
      "gitlab",
      providerName,
      "the identity provider (`gitlab`; [adding one](#adding-another-identity-provider-eg-github))",
    ),
    /** `device`: the spec's device flow; `redirect`: consent page and the provider's sign-in. */
    signIn: variable(
      "GITLAB_SIGN_IN",
      "device",
      caseInsensitive(oneOf("device", "redirect")),
      "`redirect`: GitLab's redirect sign-in with our consent page ([why](#redirect-sign-in))",
      "`device` (strict: `redirect`)",
    ),
    /** A confidential application's secret (redirect sign-in only); a secret: never logged. */
    clientSecret: secret(variable(
      "GITLAB_CLIENT_SECRET",
      undefined,
      text,
      "redirect sign-in: the secret of a confidential GitLab application",
    )),
  },
  upstreamTimeoutMs: variable(
    "UPSTREAM_TIMEOUT_MS",
    "10000",
    integerBetween(1, 600_000),
    "time limit of every call to GitLab",
  ),
} satisfies ConfigTable;

/** What UPSTREAM_VARIABLES reads to. */
export type UpstreamConfig = ValuesOf<typeof UPSTREAM_VARIABLES>;

/** GitLab scopes that let a user's token read group memberships. */
export const MEMBERSHIP_SCOPES: readonly string[] = ["read_api", "api"];

/** Scopes as GITLAB_SCOPES (or a server's `gitlab_scopes`) writes them: names apart. */
export function scopeList(scopes: string): string[] {
  return scopes.split(/[\s,]+/).filter(Boolean);
}

/**
 * Throws a ConfigError naming `variable` unless GITLAB_SCOPES lets the user's token read group
 * memberships.
 */
export function requireMembershipScope(
  config: Pick<UpstreamConfig, "upstream">,
  variable: string,
): void {
  const scopes = scopeList(config.upstream.scopes);
  if (MEMBERSHIP_SCOPES.some((scope) => scopes.includes(scope))) return;
  throw new ConfigError(
    variable,
    `needs read_api or api in ${UPSTREAM_VARIABLES.upstream.scopes.name} to read memberships ` +
      `(it is ${JSON.stringify(config.upstream.scopes)})`,
  );
}
