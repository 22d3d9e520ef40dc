/**
 * Who may sign in, asked again by the refresh grant and the gateway once a session's decision is
 * older than ACCESS_RECHECK_SECONDS, with the session's own (fresh) GitLab token. While GitLab
 * cannot answer (network, 5xx, 429) the last decision stands for ACCESS_RECHECK_GRACE_SECONDS
 * after it fell due, then the caller fails closed (503); the session is kept for when GitLab
 * answers again.
 *
 * @see docs/security.md "Who can sign in"
 */

import { decideAccess } from "../access/admission.ts";
import {
  type AccessPolicy,
  admits,
  listsAdmit,
  type ProviderRoles,
  refusalReason,
} from "../access/policy.ts";
import type { Clock } from "../clock.ts";
import type { AccessConfig } from "../access/config.ts";
import type { AccessRules } from "../access/rules.ts";
import type { Store } from "../store/mod.ts";
import type { SessionAccess, SessionRecord } from "../store/records.ts";
import { type Upstream, UpstreamError } from "../upstream/types.ts";

/** What the re-check needs. */
export interface RecheckDeps {
  store: Store;
  clock: Clock;
  upstream: Upstream;
  /** ACCESS_RECHECK_SECONDS and ACCESS_RECHECK_GRACE_SECONDS. */
  config: Pick<AccessConfig, "access">;
  /** The lists in force; their learnt groups are asked at once if never asked. */
  rules: AccessRules;
  /** The lists of the MCP server the session is for (MCP_SERVERS_FILE), if it has any. */
  serverLists?: AccessPolicy;
}

/** What the re-check came to. */
export type Recheck =
  /** `session` carries the new decision when GitLab was asked. */
  | { kind: "admitted"; session: SessionRecord }
  /** No longer admitted: the session must end. `reason` is for the operator's log. */
  | { kind: "refused"; reason: string }
  /** GitLab has not answered for longer than the last decision may stand (the grace). */
  | { kind: "unconfirmed" };

/** Whether `session`'s decision is due to be asked again (none is kept when nothing is listed). */
export function recheckDue(
  deps: Pick<RecheckDeps, "clock" | "config" | "rules">,
  session: SessionRecord,
): boolean {
  const { config, rules } = deps;
  if (!rules.decides) return false;
  const last = session.access;
  const recent = last !== undefined &&
    deps.clock.now() - last.checkedAt < config.access.recheckSeconds * 1000;
  return !(recent && asked(last, rules.groupsToAsk, rules.policy.groups.length));
}

/** Re-checks `session` when due; never throws for GitLab's failures. */
export async function recheckAccess(deps: RecheckDeps, session: SessionRecord): Promise<Recheck> {
  const { store, clock, upstream, config } = deps;
  const { policy, restricted, learntGroups, roles } = deps.rules;
  if (!recheckDue(deps, session)) return serverListsDecide(deps.serverLists, session, roles);
  const now = clock.now();
  const last = session.access;
  const tokens = await store.openUpstreamTokens(session);
  if (!tokens) return { kind: "unconfirmed" };
  const user = { id: session.upstreamUserId, username: session.upstreamUsername };
  try {
    const access = await decideAccess(
      upstream,
      policy,
      roles,
      tokens.accessToken,
      user,
      now,
      learntGroups,
    );
    if (restricted && !admits(access)) {
      return { kind: "refused", reason: refusalReason(policy, access, roles) };
    }
    return serverListsDecide(deps.serverLists, { ...session, access }, roles);
  } catch (error) {
    if (!(error instanceof UpstreamError)) throw error;
    // GitLab refusing the user's token itself (revoked, blocked account) is an answer.
    if (error.failure === "terminal") {
      return { kind: "refused", reason: `GitLab refused the token (${error.code})` };
    }
    // The grace runs from when the decision fell due, so it is what the operator set.
    const dueAt = last === undefined ? now : last.checkedAt + config.access.recheckSeconds * 1000;
    const graceMs = config.access.recheckGraceSeconds * 1000;
    const stands = graceMs > 0 && last !== undefined && now - dueAt <= graceMs;
    return stands ? { kind: "admitted", session } : { kind: "unconfirmed" };
  }
}

/**
 * The decision of the session's MCP server's own lists, from what the session learnt: they
 * narrow the service-wide lists, so a session they do not admit ends. `roles`: the provider's.
 */
export function serverListsDecide(
  lists: AccessPolicy | undefined,
  session: SessionRecord,
  roles: ProviderRoles,
): Recheck {
  const user = { id: session.upstreamUserId, username: session.upstreamUsername };
  if (!lists || listsAdmit(lists, user, session.access, roles)) {
    return { kind: "admitted", session };
  }
  return { kind: "refused", reason: `not in the lists of the MCP server ${session.resource}` };
}

/**
 * Whether the last decision asked every group in `paths` (a policy reloaded with new groups
 * makes the next refresh ask at once). A record without `groupsAsked` asked the listed ones.
 */
function asked(last: SessionAccess, paths: readonly string[], listed: number): boolean {
  if (last.groupsAsked === undefined) return paths.length <= listed;
  const known = new Set(last.groupsAsked.map((path) => path.toLowerCase()));
  return paths.every((path) => known.has(path.toLowerCase()));
}
