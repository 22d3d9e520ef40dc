/**
 * What every sign-in does once the upstream has vouched for the user, whether a device flow's
 * poll or the redirect sign-in's callback got the tokens: seal them, store the new session and
 * our authorization code in the caller's commit, sweep abandoned sign-ins, and log it.
 *
 * @see spec §4.2 (on success) and §3.3
 */

import { endDepsOf, type OAuthRequestContext } from "../http/context.ts";
import { redact } from "../logger.ts";
import { sweepAbandonedSignIns } from "../session/end.ts";
import { newSignIn, type SignInRequest } from "../session/life.ts";
import type { FlowCompletion } from "../store/flows.ts";
import type { UpstreamTokenSet } from "../store/records.ts";
import type { UpstreamUser } from "../upstream/types.ts";

/**
 * Stores the sign-in of `user` with `tokens` for `request` through `commit` (false: nothing was
 * stored); the completion, or null when the commit refused it.
 *
 * @see spec §4.2 (on success)
 */
export async function storeSignIn(
  ctx: OAuthRequestContext,
  request: SignInRequest,
  upstream: { tokens: UpstreamTokenSet; user: UpstreamUser },
  commit: (completion: FlowCompletion) => Promise<boolean>,
): Promise<FlowCompletion | null> {
  const { store, clock, logger } = ctx.deps;
  const { tokens, user } = upstream;
  const sealedTokens = await store.sealUpstreamTokens(tokens);
  const completion = newSignIn(
    request,
    { sealedTokens, expiresAt: tokens.expiresAt, user },
    clock.now(),
  );
  if (!await commit(completion)) return null;
  ctx.deps.metrics.signInsFinished.inc({
    mode: ctx.deps.config.upstream.signIn,
    outcome: "completed",
  });
  await sweepAbandonedSignIns(endDepsOf(ctx), { requestId: ctx.requestId });
  logger.info("sign-in completed", {
    requestId: ctx.requestId,
    sessionId: completion.session.id,
    clientId: completion.session.clientId,
    gitlabUser: user.username,
    code: redact(completion.code),
  });
  return completion;
}
