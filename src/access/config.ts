/**
 * Who may sign in (ALLOWED_GITLAB_GROUPS, ALLOWED_GITLAB_USERS, ALLOW_ANY_GITLAB_USER) and how
 * often it is asked again.
 */

import { integerBetween, parseBoolean } from "../config/parsers.ts";
import {
  ConfigError,
  type ConfigTable,
  type Parser,
  type ValuesOf,
  variable,
} from "../config/variable.ts";
import { type AccessPolicy, parseAllowedGroups, parseAllowedUsers } from "./policy.ts";

/**
 * A list that must name someone: a value of commas alone (`,`, a template's empty items) would
 * read as no list, which admits everyone, the opposite of what setting the variable asks.
 */
function namingSome<T>(parse: Parser<T[]>, what: string): Parser<T[]> {
  return (name, raw) => {
    const list = parse(name, raw);
    if (list.length === 0) {
      throw new ConfigError(name, `lists no ${what} (unset it to admit anyone)`);
    }
    return list;
  };
}

export const ACCESS_VARIABLES = {
  /** Who may sign in; both lists unset: every account the upstream signs in (the spec). */
  access: {
    groups: variable(
      "ALLOWED_GITLAB_GROUPS",
      undefined,
      namingSome(parseAllowedGroups, "group"),
      "group full paths whose members may sign in, each with an optional `:role`",
      "anyone",
    ),
    users: variable(
      "ALLOWED_GITLAB_USERS",
      undefined,
      namingSome(parseAllowedUsers, "user"),
      "usernames or user ids (`id:<n>`, preferred) who may sign in too, comma-separated",
      "anyone",
    ),
    /**
     * How old a session's decision may be: the gateway (before forwarding) and the refresh grant
     * ask GitLab again once it is older.
     */
    recheckSeconds: variable(
      "ACCESS_RECHECK_SECONDS",
      "300",
      integerBetween(1, 86_400),
      "a session's admission is asked again once older than this, by the gateway and by refresh",
    ),
    /** While GitLab cannot answer a re-check, the last decision stands this long after it. */
    recheckGraceSeconds: variable(
      "ACCESS_RECHECK_GRACE_SECONDS",
      "3600",
      integerBetween(0, 86_400),
      "while GitLab cannot answer a re-check, the last decision stands this long; then 503",
      "`3600` (strict: `0`)",
    ),
    /** Under SECURITY_PROFILE=strict on gitlab.com: no list, on purpose. */
    allowAnyUser: variable(
      "ALLOW_ANY_GITLAB_USER",
      "false",
      parseBoolean,
      "`true`: no list on gitlab.com on purpose (strict refuses to start otherwise)",
    ),
  },
} satisfies ConfigTable;

/** What ACCESS_VARIABLES reads to. */
export type AccessConfig = ValuesOf<typeof ACCESS_VARIABLES>;

/** Who may sign in, as ALLOWED_GITLAB_GROUPS and ALLOWED_GITLAB_USERS say (both empty: anyone). */
export function accessPolicyOf(config: Pick<AccessConfig, "access">): AccessPolicy {
  return { groups: config.access.groups ?? [], users: config.access.users ?? [] };
}
