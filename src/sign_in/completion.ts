/**
 * What every sign-in does once the upstream has vouched for the user, whether a device flow's
 * poll or the redirect sign-in's callback got the tokens: seal them, store the new session and
 * our authorization code in the caller's commit, sweep abandoned sign-ins, and log it.
 *
 * @see spec §4.2 (on success) and §3.3
 */

import type { SignInContext } from "./deps.ts";
import { redact } from "../logger.ts";
import { admittedBy } from "../access/policy.ts";
import { sweepAbandonedSignIns } from "../session/end.ts";
import { newSignIn, type SignInRequest } from "../session/life.ts";
import type { FlowCompletion } from "../store/flows.ts";
import type { SessionAccess, UpstreamTokenSet } from "../store/records.ts";
import type { UpstreamUser } from "../upstream/types.ts";

/**
 * Revokes the GitLab token of a sign-in that failed after GitLab issued it (the user lookup
 * failed, or the sign-in could no longer be stored): no session holds it, so nothing would ever
 * use or revoke it. Best effort: a failure is logged, never thrown.
 */
export async function revokeAbandonedUpstreamTokens(
  ctx: SignInContext,
  tokens: UpstreamTokenSet,
  reason: string,
): Promise<void> {
  try {
    await ctx.oauth.upstream.revokeToken(tokens.accessToken);
    ctx.deps.logger.info("GitLab token of a failed sign-in revoked", {
      requestId: ctx.requestId,
      reason,
    });
  } catch (error) {
    ctx.deps.logger.warn("GitLab token revocation failed", {
      requestId: ctx.requestId,
      reason,
      gitlabToken: redact(tokens.accessToken),
      error: String(error),
    });
  }
}

/**
 * The user the tokens belong to; when the lookup fails the tokens are revoked first (for a
 * sign-in that holds them nowhere else, such as the redirect sign-in's callback).
 */
export function fetchUserOrRevoke(
  ctx: SignInContext,
  tokens: UpstreamTokenSet,
): Promise<UpstreamUser> {
  return orRevoke(
    ctx,
    tokens,
    "user lookup failed",
    () => ctx.oauth.upstream.fetchUser(tokens.accessToken),
  );
}

/**
 * What `step` answers; when it throws, `tokens` (held nowhere else yet, as at the redirect
 * sign-in's callback) are revoked first: the membership question failing, or the store.
 */
export async function orRevoke<T>(
  ctx: SignInContext,
  tokens: UpstreamTokenSet,
  reason: string,
  step: (tokens: UpstreamTokenSet) => Promise<T>,
): Promise<T> {
  try {
    return await step(tokens);
  } catch (error) {
    await revokeAbandonedUpstreamTokens(ctx, tokens, reason);
    throw error;
  }
}

/**
 * Stores the sign-in of `user` with `tokens` for `request` through `commit` (false: nothing was
 * stored); the completion, or null when the commit refused it.
 *
 * @see spec §4.2 (on success)
 */
export async function storeSignIn(
  ctx: SignInContext,
  request: SignInRequest,
  upstream: { tokens: UpstreamTokenSet; user: UpstreamUser; access?: SessionAccess },
  commit: (completion: FlowCompletion) => Promise<boolean>,
): Promise<FlowCompletion | null> {
  const { store, clock, logger } = ctx.deps;
  const { tokens, user, access } = upstream;
  const sealedTokens = await store.sealUpstreamTokens(tokens);
  const completion = newSignIn(
    request,
    { sealedTokens, expiresAt: tokens.expiresAt, user, access },
    clock.now(),
  );
  if (!await commit(completion)) return null;
  ctx.deps.metrics.signInsFinished.inc({
    mode: ctx.deps.config.upstream.signIn,
    outcome: "completed",
  });
  await sweepAbandonedSignIns({ ...ctx.deps, upstream: ctx.oauth.upstream }, {
    requestId: ctx.requestId,
  });
  logger.info("sign-in completed", {
    requestId: ctx.requestId,
    sessionId: completion.session.id,
    clientId: completion.session.clientId,
    gitlabUser: user.username,
    ...(access ? { admittedBy: admittedBy(access).join(", ") } : {}),
    code: redact(completion.code),
  });
  return completion;
}
