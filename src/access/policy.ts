/**
 * Who may sign in (ALLOWED_GITLAB_GROUPS, ALLOWED_GITLAB_USERS): the lists as configured, and
 * the decision from what the provider said of the user's memberships, by the roles the provider
 * declares (`ProviderRoles`: GitLab's are in `upstream/gitlab.ts`). Knows nothing of HTTP or the
 * store; `admission.ts` asks the provider.
 *
 * @see docs/security.md "Who can sign in"
 */

import { ConfigError } from "../config/variable.ts";
import type { SessionAccess } from "../store/records.ts";
import type { ProviderRoles } from "../upstream/types.ts";

export type { SessionAccess } from "../store/records.ts";
export type { ProviderRoles } from "../upstream/types.ts";

/** One entry of ALLOWED_GITLAB_GROUPS: a group's full path, and the role it takes at least. */
export interface AllowedGroup {
  /** The group's full path, e.g. `acme/platform`, as written (GitLab matches it in any case). */
  path: string;
  /**
   * The role's name as written (matched in any case, and an error echoes what the operator
   * typed): the configuration checks it against the provider's roles once the provider is
   * chosen (`unknownRole`). Undefined: the provider's `unnamed` role (GitLab: Guest or more;
   * Minimal Access only when a rule names it).
   */
  minRole?: string;
}

/** The configured lists; both empty: everyone GitLab signs in is admitted. */
export interface AccessPolicy {
  groups: AllowedGroup[];
  /** Accounts as `accountList` parses them: usernames in lower case, and `id:<n>`. */
  users: string[];
}

/** Whether any list is configured (otherwise nobody is asked anything). */
export function isRestricted(policy: AccessPolicy): boolean {
  return policy.groups.length > 0 || policy.users.length > 0;
}

/** A group path segment as GitLab allows it (letters, digits, `_`, `-`, `.`). */
const GROUP_PATH = /^[A-Za-z0-9_.][A-Za-z0-9_.-]*(\/[A-Za-z0-9_.][A-Za-z0-9_.-]*)*$/;
/** A GitLab username. */
const USERNAME = /^[A-Za-z0-9_.][A-Za-z0-9_.-]*$/;

/** Parses ALLOWED_GITLAB_GROUPS: `acme, acme/platform:developer`. */
export function parseAllowedGroups(name: string, raw: string): AllowedGroup[] {
  return commaList(raw).map((entry) => {
    const [path, role, extra] = entry.split(":").map((part) => part.trim());
    if (extra !== undefined || !GROUP_PATH.test(path)) {
      throw new ConfigError(
        name,
        `${JSON.stringify(entry)} is not a group's full path with an optional ":role"`,
      );
    }
    if (role === undefined) return { path };
    return { path, minRole: role };
  });
}

/**
 * Why `group`'s role is not one of the provider's `roles`, in the words start-up and reloads
 * refuse it with; undefined when it is one (or none is named).
 */
export function unknownRole(group: AllowedGroup, roles: ProviderRoles): string | undefined {
  const { minRole } = group;
  if (minRole === undefined || Object.hasOwn(roles.levels, minRole.toLowerCase())) return undefined;
  const entry = JSON.stringify(`${group.path}:${minRole}`);
  const names = Object.keys(roles.levels).join(", ") || "none (the provider declares no roles)";
  return `unknown role ${JSON.stringify(minRole)} in ${entry}; roles: ${names}`;
}

/**
 * Parses a list of accounts (ALLOWED_GITLAB_USERS, a policy rule's `users`, any per-server
 * list): comma-separated usernames (an `@` before one is ignored), kept in lower case, and user
 * ids written `id:<n>`, kept as `id:<n>` without leading zeros. A username has no `:`, so the two
 * never meet.
 */
export function parseAllowedUsers(name: string, raw: string): string[] {
  return commaList(raw).map((entry) => {
    const id = /^id:\s*([0-9]{1,20})$/i.exec(entry);
    if (id) return `id:${id[1].replace(/^0+(?=.)/, "")}`;
    const username = entry.replace(/^@/, "");
    if (!USERNAME.test(username)) {
      throw new ConfigError(
        name,
        `${JSON.stringify(entry)} is not a GitLab username or a user id written id:<number>`,
      );
    }
    return username.toLowerCase();
  });
}

/** Whether an account list (as `parseAllowedUsers` reads it) names `user`, by id or by name. */
export function namesAccount(list: readonly string[], user: ListedAccount): boolean {
  return list.includes(`id:${user.id}`) || list.includes(user.username.toLowerCase());
}

/** What an account list is matched against: the id and the username stored at sign-in. */
export interface ListedAccount {
  /** The provider's user id, as text. */
  id: string;
  username: string;
}

function commaList(raw: string): string[] {
  return raw.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "");
}

/** Whether ALLOWED_GITLAB_USERS names `user`. */
export function isListedUser(policy: AccessPolicy, user: ListedAccount): boolean {
  return namesAccount(policy.users, user);
}

/**
 * Whether a membership's level meets a listed group's role (the provider's `unnamed` one when
 * none is named); a role the provider does not declare is met by nobody.
 */
export function meetsRole(group: AllowedGroup, accessLevel: number, roles: ProviderRoles): boolean {
  const role = group.minRole?.toLowerCase() ?? roles.unnamed;
  if (role === undefined) return true;
  return Object.hasOwn(roles.levels, role) && accessLevel >= roles.levels[role];
}

/**
 * The decision from the user's access levels in the listed groups (absent: not a member), at
 * `nowMs`: admitted when a listed group's role is met or the user is listed.
 */
export function decide(
  policy: AccessPolicy,
  user: ListedAccount,
  groupLevels: Record<string, number>,
  nowMs: number,
  roles: ProviderRoles,
): SessionAccess {
  const admittingGroups = policy.groups
    .filter((group) =>
      group.path in groupLevels && meetsRole(group, groupLevels[group.path], roles)
    )
    .map((group) => group.path);
  return {
    checkedAt: nowMs,
    groupLevels,
    admittingGroups,
    listedUser: isListedUser(policy, user),
  };
}

/**
 * Whether an MCP server's own lists (MCP_SERVERS_FILE `allowed_gitlab_groups`,
 * `allowed_gitlab_users`) admit `user`, from the levels the session learnt (groups are matched
 * in any case, as GitLab does), by the provider's `roles`. Either list admits; no learnt
 * levels admit by group nobody.
 */
export function listsAdmit(
  lists: AccessPolicy,
  user: ListedAccount,
  access: Pick<SessionAccess, "groupLevels"> | undefined,
  roles: ProviderRoles,
): boolean {
  if (namesAccount(lists.users, user)) return true;
  const levels = Object.entries(access?.groupLevels ?? {});
  return lists.groups.some((group) => {
    const path = group.path.toLowerCase();
    const found = levels.find(([asked]) => asked.toLowerCase() === path);
    return found !== undefined && meetsRole(group, found[1], roles);
  });
}

/** Whether a decision admits. */
export function admits(access: SessionAccess): boolean {
  return access.listedUser || access.admittingGroups.length > 0;
}

/** What admitted a session, for log lines and the operator: groups, then `user list`. */
export function admittedBy(access: SessionAccess): string[] {
  return [...access.admittingGroups, ...(access.listedUser ? ["user list"] : [])];
}

/** Why a decision refuses, for the operator's log line: each listed group's answer. */
export function refusalReason(
  policy: AccessPolicy,
  access: SessionAccess,
  roles: ProviderRoles,
): string {
  const groups = policy.groups.map((group) => {
    const level = access.groupLevels[group.path];
    if (level === undefined) return `${group.path}: not a member`;
    const needs = group.minRole ?? roles.unnamed ?? "a membership";
    return `${group.path}: ${roleOf(level, roles)}, needs ${needs}`;
  });
  const users = policy.users.length > 0 ? ["not in ALLOWED_GITLAB_USERS"] : [];
  return [...groups, ...users].join("; ");
}

/** The role a level is among the provider's `roles` (the highest it reaches), or the number. */
function roleOf(level: number, roles: ProviderRoles): string {
  const reached = Object.entries(roles.levels).filter(([, value]) => level >= value);
  return reached.at(-1)?.[0] ?? `access level ${level}`;
}
