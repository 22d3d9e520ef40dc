/**
 * Who may sign in (ALLOWED_GITLAB_GROUPS, ALLOWED_GITLAB_USERS): the lists as configured, the
 * GitLab roles and their access levels, and the decision from what GitLab said of the user's
 * memberships. Knows nothing of HTTP or the store; `admission.ts` asks GitLab.
 *
 * @see docs/security.md "Who can sign in", https://docs.gitlab.com/api/members/#roles
 */

import { ConfigError } from "../config/variable.ts";
import type { SessionAccess } from "../store/records.ts";

export type { SessionAccess } from "../store/records.ts";

/**
 * GitLab's roles and their `access_level` values. Minimal Access (5) is no membership unless a
 * rule names it: it sees nothing of the group's projects.
 */
export const GITLAB_ROLES = {
  minimal_access: 5,
  guest: 10,
  planner: 15,
  reporter: 20,
  developer: 30,
  maintainer: 40,
  owner: 50,
} as const;

export type GitLabRole = keyof typeof GITLAB_ROLES;

/** One entry of ALLOWED_GITLAB_GROUPS: a group's full path, and the role it takes at least. */
export interface AllowedGroup {
  /** The group's full path, e.g. `acme/platform`, as written (GitLab matches it in any case). */
  path: string;
  /** Undefined: Guest or more admits (Minimal Access only when a rule names it). */
  minRole?: GitLabRole;
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
    const minRole = role.toLowerCase();
    if (!(minRole in GITLAB_ROLES)) {
      throw new ConfigError(
        name,
        `unknown role ${JSON.stringify(role)} in ${JSON.stringify(entry)}; roles: ` +
          Object.keys(GITLAB_ROLES).join(", "),
      );
    }
    return { path, minRole: minRole as GitLabRole };
  });
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

/** Whether an `access_level` meets a listed group's role (Guest when none is named). */
export function meetsRole(group: AllowedGroup, accessLevel: number): boolean {
  return accessLevel >= GITLAB_ROLES[group.minRole ?? "guest"];
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
): SessionAccess {
  const admittingGroups = policy.groups
    .filter((group) => group.path in groupLevels && meetsRole(group, groupLevels[group.path]))
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
 * in any case, as GitLab does). Either list admits; no learnt levels admit by group nobody.
 */
export function listsAdmit(
  lists: AccessPolicy,
  user: ListedAccount,
  access: Pick<SessionAccess, "groupLevels"> | undefined,
): boolean {
  if (namesAccount(lists.users, user)) return true;
  const levels = Object.entries(access?.groupLevels ?? {});
  return lists.groups.some((group) => {
    const path = group.path.toLowerCase();
    const found = levels.find(([asked]) => asked.toLowerCase() === path);
    return found !== undefined && meetsRole(group, found[1]);
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
export function refusalReason(policy: AccessPolicy, access: SessionAccess): string {
  const groups = policy.groups.map((group) => {
    const level = access.groupLevels[group.path];
    if (level === undefined) return `${group.path}: not a member`;
    return `${group.path}: ${roleOf(level)}, needs ${group.minRole ?? "guest"}`;
  });
  const users = policy.users.length > 0 ? ["not in ALLOWED_GITLAB_USERS"] : [];
  return [...groups, ...users].join("; ");
}

/** The role an access level is (the highest role it reaches), or the number itself. */
function roleOf(level: number): string {
  const reached = Object.entries(GITLAB_ROLES).filter(([, value]) => level >= value);
  return reached.at(-1)?.[0] ?? `access level ${level}`;
}
