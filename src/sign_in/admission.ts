/**
 * Whether a sign-in may complete (ALLOWED_GITLAB_GROUPS, ALLOWED_GITLAB_USERS): asked once the
 * upstream has named the user, in both sign-in modes, before our authorization code exists. A
 * refused sign-in's GitLab token is revoked at once and the refusal logged as a warning with
 * the username and the reason; the caller answers the mode's refusal.
 *
 * @see docs/security.md "Who can sign in"
 */

import { decideAccess } from "../access/admission.ts";
import { type AccessPolicy, admits, listsAdmit, refusalReason } from "../access/policy.ts";
import type { SignInContext } from "./deps.ts";
import { redact } from "../logger.ts";
import type { SessionAccess, UpstreamTokenSet } from "../store/records.ts";
import type { UpstreamProfile, UpstreamUser } from "../upstream/types.ts";

/** What the lists say of a signed-in user. */
export type SignInAdmission =
  /** `access` is absent when no list restricts who may sign in. */
  | { kind: "admitted"; access?: SessionAccess }
  /** `message` is for the user: their account, why (in words), and what to do. */
  | { kind: "refused"; message: string };

/**
 * Asks the upstream whether `user` may sign in; on a refusal revokes `tokens` (best effort) and
 * logs it. Throws UpstreamError when the upstream cannot be asked (the caller's usual handling:
 * the device flow stays pending, the redirect returns `temporarily_unavailable`).
 */
export async function admitSignIn(
  ctx: SignInContext,
  tokens: UpstreamTokenSet,
  user: UpstreamUser,
  resource: string | undefined,
): Promise<SignInAdmission> {
  const rules = ctx.deps.callPolicy.rules;
  const { policy } = rules;
  const serverLists = serverListsOf(ctx, resource);
  if (!rules.decides && !serverLists) return { kind: "admitted" };
  const { upstream } = ctx.oauth;
  const access = await decideAccess(
    upstream,
    policy,
    rules.roles,
    tokens.accessToken,
    user,
    ctx.deps.clock.now(),
    rules.learntGroups,
  );
  // Without a list everyone is admitted; the levels are kept for the gateway's policy.
  const serviceAdmits = !rules.restricted || admits(access);
  const serverAdmits = !serverLists || listsAdmit(serverLists, user, access, rules.roles);
  if (serviceAdmits && serverAdmits) return { kind: "admitted", access };
  const refusedBy = serviceAdmits && serverLists ? serverLists : policy;
  ctx.deps.logger.warn("sign-in refused: account not allowed", {
    requestId: ctx.requestId,
    gitlabUser: user.username,
    reason: serviceAdmits
      ? `not in the lists of the MCP server ${resource}`
      : refusalReason(policy, access, rules.roles),
  });
  await revokeRefusedToken(ctx, tokens.accessToken);
  ctx.deps.metrics.signInsFinished.inc({
    mode: ctx.deps.config.upstream.signIn,
    outcome: "refused",
  });
  return {
    kind: "refused",
    message: refusalMessage(upstream.profile, user.username, refusedBy),
  };
}

/** The lists of the MCP server `resource` names (MCP_SERVERS_FILE), if it has any. */
function serverListsOf(ctx: SignInContext, resource: string | undefined) {
  const url = resource === undefined ? null : URL.parse(resource);
  return url ? ctx.deps.servers.at(url, ctx.baseUrl)?.entry?.lists : undefined;
}

/**
 * What a refused user reads: which account, that this service refused it and why (in words:
 * which groups are listed is the operator's to tell), and what to do.
 */
export function refusalMessage(
  profile: UpstreamProfile,
  username: string,
  policy: AccessPolicy,
): string {
  return `The ${profile.displayName} account @${username} is not allowed to sign in here: ` +
    `${refusalInWords(policy)} ` +
    `Ask the operator of this service to admit it, or sign in to ${profile.displayName} ` +
    `with another account and try again.`;
}

/** Why an account is refused, in words, from what the lists admit. */
function refusalInWords(policy: AccessPolicy): string {
  const groups = policy.groups.length > 0;
  const users = policy.users.length > 0;
  if (groups && users) {
    return "this service admits only members of certain groups and accounts it lists, " +
      "and this account is neither.";
  }
  return groups
    ? "this service admits only members of certain groups (with the role they ask for), and " +
      "this account is not one."
    : "this service admits only the accounts it lists, and this account is not one of them.";
}

/** Revokes the refused user's token (and its refresh token with it); a failure is logged. */
async function revokeRefusedToken(ctx: SignInContext, accessToken: string): Promise<void> {
  const { upstream } = ctx.oauth;
  try {
    await upstream.revokeToken(accessToken);
  } catch (error) {
    ctx.deps.logger.warn(`${upstream.profile.displayName} token revocation failed`, {
      requestId: ctx.requestId,
      gitlabToken: redact(accessToken),
      error: String(error),
    });
  }
}
