/**
 * Asking the upstream whether a user is admitted: their access level in every listed group
 * (GitLab's members/all, so memberships through parent groups count), with the user's own
 * token, then the policy's decision. Every listed group is asked, not only until one admits:
 * the session keeps each level for the gateway's per-tool policy.
 */

import { type AccessPolicy, decide, type SessionAccess } from "./policy.ts";
import type { Upstream, UpstreamUser } from "../upstream/types.ts";

/**
 * The decision for `user` at `nowMs`. Throws UpstreamError when the upstream cannot answer;
 * throws TypeError when groups are listed and the upstream has no memberships (start-up
 * refuses that configuration).
 */
export async function decideAccess(
  upstream: Pick<Upstream, "membership">,
  policy: AccessPolicy,
  accessToken: string,
  user: UpstreamUser,
  nowMs: number,
): Promise<SessionAccess> {
  if (policy.groups.length > 0 && !upstream.membership) {
    throw new TypeError("the upstream cannot tell group memberships");
  }
  const levels = await Promise.all(
    policy.groups.map((group) =>
      upstream.membership?.(accessToken, group.path, user.id) ?? Promise.resolve(null)
    ),
  );
  const groupLevels: Record<string, number> = {};
  policy.groups.forEach((group, i) => {
    const level = levels[i];
    if (level !== null) groupLevels[group.path] = level;
  });
  return decide(policy, user.username, groupLevels, nowMs);
}
