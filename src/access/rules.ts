/**
 * Who may sign in and what they may call, as the lists and the policy in force say it: worked
 * out when they change (start-up, a reload of a policy or servers file) and read by every
 * refresh, gateway request and sign-in, which read the answer instead of deriving it again.
 */

import { groupsToAsk } from "./admission.ts";
import type { CallPolicy } from "./call_policy.ts";
import { type AccessPolicy, isRestricted, type ProviderRoles } from "./policy.ts";

/** The lists and the policy in force. */
export interface AccessRules {
  /** ALLOWED_GITLAB_GROUPS and ALLOWED_GITLAB_USERS. */
  policy: AccessPolicy;
  /** Whether those lists admit only whom they name (else anyone may sign in). */
  restricted: boolean;
  /**
   * The groups whose memberships are learnt too (the policy files' and the MCP servers' own
   * lists): learnt at every sign-in and re-check, whichever server it is for.
   */
  learntGroups: readonly string[];
  /** The groups a decision asks: the listed ones, then the learnt ones not listed. */
  groupsToAsk: readonly string[];
  /** Whether a sign-in has anything to decide: a list restricts, or groups are learnt. */
  decides: boolean;
  /** MCP_POLICY_FILE's policy in force; undefined: every call passes. */
  callPolicy: CallPolicy | undefined;
  /** The provider's roles, which the lists' and the policies' `group:role` entries name. */
  roles: ProviderRoles;
}

/**
 * The rules of the service-wide `policy` with `learntGroups` learnt too, and `callPolicy`
 * deciding calls, by the provider's `roles`.
 */
export function accessRulesOf(
  policy: AccessPolicy,
  learntGroups: readonly string[],
  callPolicy: CallPolicy | undefined,
  roles: ProviderRoles,
): AccessRules {
  const restricted = isRestricted(policy);
  return {
    policy,
    restricted,
    learntGroups,
    groupsToAsk: groupsToAsk(policy, learntGroups),
    decides: restricted || learntGroups.length > 0,
    callPolicy,
    roles,
  };
}
