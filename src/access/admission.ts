/**
 * Asking the upstream whether a user is admitted: their access level in every listed group
 * (GitLab's members/all, so memberships through parent groups count), with the user's own
 * token, then the policy's decision. Every listed group is asked, not only until one admits:
 * the session keeps each level for the gateway's per-tool policy, and the groups that policy
 * names (`policyGroups`) are asked too, even when they admit nobody to sign in.
 */

import { type AccessPolicy, decide, type ProviderRoles, type SessionAccess } from "./policy.ts";
import type { Upstream, UpstreamUser } from "../upstream/types.ts";

/**
 * The decision for `user` at `nowMs`, by the provider's `roles`. Throws UpstreamError when the upstream cannot answer;
 * throws TypeError when groups are listed and the upstream has no memberships (start-up
 * refuses that configuration).
 */
export async function decideAccess(
  upstream: Pick<Upstream, "membership">,
  policy: AccessPolicy,
  roles: ProviderRoles,
  accessToken: string,
  user: UpstreamUser,
  nowMs: number,
  policyGroups: readonly string[] = [],
): Promise<SessionAccess> {
  const paths = groupsToAsk(policy, policyGroups);
  if (paths.length > 0 && !upstream.membership) {
    throw new TypeError("the upstream cannot tell group memberships");
  }
  const levels = await Promise.all(
    paths.map((path) => upstream.membership?.(accessToken, path, user.id) ?? Promise.resolve(null)),
  );
  const groupLevels: Record<string, number> = {};
  paths.forEach((path, i) => {
    const level = levels[i];
    if (level !== null) groupLevels[path] = level;
  });
  const access = decide(policy, user, groupLevels, nowMs, roles);
  return paths.length > policy.groups.length ? { ...access, groupsAsked: paths } : access;
}

/** The listed groups, then the policy's groups not listed (GitLab paths ignore case). */
export function groupsToAsk(policy: AccessPolicy, policyGroups: readonly string[]): string[] {
  const paths = policy.groups.map((group) => group.path);
  for (const path of policyGroups) {
    if (!paths.some((known) => known.toLowerCase() === path.toLowerCase())) paths.push(path);
  }
  return paths;
}
