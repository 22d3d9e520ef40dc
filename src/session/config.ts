/**
 * A session's tokens and their lifetimes, and the opt-in replay policies.
 */

import { integerBetween, oneOf, parseBoolean } from "../config/parsers.ts";
import { type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";

export const SESSION_VARIABLES = {
  accessTokenTtlSeconds: variable(
    "ACCESS_TOKEN_TTL",
    "3600",
    integerBetween(1, 86_400 * 365),
    "access-token lifetime in seconds (`expires_in`)",
  ),
  /** Sessions unused this long are forgotten; renewed by every refresh. */
  sessionIdleTtlSeconds: variable(
    "SESSION_IDLE_TTL",
    String(30 * 86_400),
    integerBetween(60, 86_400 * 3650),
    "a session unused this long is forgotten and its GitLab token revoked; every refresh renews it",
    "`2592000` (30 days)",
  ),
  /** `client`: `aud` is the client id (the spec); `resource`: the MCP server's URL (RFC 9068). */
  accessTokenAudience: variable(
    "ACCESS_TOKEN_AUDIENCE",
    "client",
    oneOf("client", "resource"),
    "`resource`: `aud` is the MCP server URL ([trade-off](#resource-indicators-rfc-8707))",
  ),
  /** Opt-in: a client that lost a refresh response may retry the old token this long. 0: off. */
  refreshGraceSeconds: variable(
    "REFRESH_GRACE_SECONDS",
    "0",
    integerBetween(0, 3600),
    "opt-in, see [Opt-in policies](#opt-in-policies)",
    "`0` (off)",
  ),
  /** Opt-in: replaying a used authorization code revokes the session it created. */
  revokeOnCodeReplay: variable(
    "REVOKE_ON_CODE_REPLAY",
    "false",
    parseBoolean,
    "opt-in, see [Opt-in policies](#opt-in-policies)",
    "`false` (strict: `true`)",
  ),
  /** Opt-in: presenting a rotated refresh token again ends its session (RFC 9700 §4.14.2). */
  revokeOnRefreshReplay: variable(
    "REVOKE_ON_REFRESH_REPLAY",
    "false",
    parseBoolean,
    "opt-in, see [Opt-in policies](#opt-in-policies)",
    "`false` (strict: `true`)",
  ),
} satisfies ConfigTable;

/** What SESSION_VARIABLES reads to. */
export type SessionConfig = ValuesOf<typeof SESSION_VARIABLES>;
