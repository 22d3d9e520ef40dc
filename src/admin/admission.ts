/**
 * What admitted a session, as the operator reads it: the listed groups (ALLOWED_GITLAB_GROUPS)
 * with the role the user had in each, and ALLOWED_GITLAB_USERS; nothing for a session signed in
 * while anyone was admitted (it has no `access`).
 */

import type { SessionRecord } from "../store/records.ts";
import type { ProviderRoles } from "../upstream/types.ts";

/** One listed group that admitted a session. */
export interface AdmittingGroup {
  /** The group's full path, as ALLOWED_GITLAB_GROUPS names it. */
  path: string;
  /**
   * The provider's name of the user's level there (its declared roles), or `access level N` for
   * another number.
   */
  role: string;
  /** The user's `access_level` in the group; null if the record does not hold it. */
  accessLevel: number | null;
}

/** What admitted a session; null when no list applied at its sign-in. */
export interface Admission {
  groups: AdmittingGroup[];
  /** Whether ALLOWED_GITLAB_USERS named the user. */
  userList: boolean;
}

/** The role a level is: the provider's name of it when it declares one, else the number. */
function roleName(level: number | undefined, roles: ProviderRoles | undefined): string {
  if (level === undefined) return "role unknown";
  const named = Object.entries(roles?.levels ?? {}).find(([, value]) => value === level);
  return named?.[0] ?? `access level ${level}`;
}

/** What admitted `session`, its levels named by the provider's `roles` (absent: as numbers). */
export function admissionOf(session: SessionRecord, roles?: ProviderRoles): Admission | null {
  const { access } = session;
  if (!access) return null;
  const groups = access.admittingGroups.map((path) => {
    const level = access.groupLevels[path];
    return { path, role: roleName(level, roles), accessLevel: level ?? null };
  });
  return { groups, userList: access.listedUser };
}

/** The table's cell: `acme (guest), acme/platform (developer), user list`, or `—`. */
export function admissionLabel(admission: Admission | null): string {
  if (!admission) return "—";
  const labels = [
    ...admission.groups.map((group) => `${group.path} (${group.role})`),
    ...(admission.userList ? ["user list"] : []),
  ];
  // A record that kept levels but names nothing that admitted it (no live session should).
  return labels.length > 0 ? labels.join(", ") : "nothing";
}

/**
 * Whether `groupPath` (a full path, any case: GitLab's paths are case-insensitive) is one of
 * the groups that admitted `session`; a member of it admitted otherwise does not count.
 */
export function admittedThrough(session: SessionRecord, groupPath: string): boolean {
  const wanted = groupPath.trim().toLowerCase();
  return session.access?.admittingGroups.some((path) => path.toLowerCase() === wanted) ?? false;
}
