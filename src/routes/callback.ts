/**
 * `GET /oauth/callback` (GITLAB_SIGN_IN=redirect): where the upstream returns the browser. The
 * `state` must name a live, unused step started in this browser (else the 400 page: login
 * CSRF, replay); the step is taken before anything else, so a replay finds nothing. A code is
 * exchanged (with the step's PKCE verifier), the user looked up, and the session and our
 * authorization code created as a completed device flow creates them; the browser returns to
 * the client with `code`, `state` and `iss`. The upstream's `access_denied` returns there too; a
 * user this service refuses reads why on our page, with a link back to the client. A sign-in
 * started at `/device` completes there instead (`sign_in/device_authorization/completion.ts`).
 *
 * @see RFC 6749 §4.1.2 and §10.12, RFC 7636, RFC 9207
 */

import type { SignInContext } from "../sign_in/deps.ts";
import { OAuthError } from "../http/errors.ts";
import { singleValued } from "../http/params.ts";
import { admitSignIn } from "../sign_in/admission.ts";
import {
  fetchUserOrRevoke,
  orRevoke,
  revokeAbandonedUpstreamTokens,
  storeSignIn,
} from "../sign_in/completion.ts";
import { type SignInRecord, upstreamTokenSet } from "../store/records.ts";
import {
  alreadyUsed,
  callbackUrl,
  isSameBrowser,
  liveStep,
  otherBrowser,
  refusalPage,
  returnToClient,
} from "../sign_in/redirect_flow.ts";
import { UpstreamError } from "../upstream/types.ts";
import { signInFailure } from "../sign_in/upstream_failure.ts";
import { completeDeviceSignIn } from "../sign_in/device_authorization/completion.ts";
import { denyDevice } from "../sign_in/device_authorization/flow_sign_in.ts";

/** Handles `GET /oauth/callback`. */
export async function handleCallback(ctx: SignInContext): Promise<Response> {
  const params = singleValued(ctx.url.searchParams);
  const signIn = await liveStep(ctx, params.get("state"), "upstream");
  if (!signIn) return alreadyUsed(ctx);
  if (!isSameBrowser(ctx, signIn.value)) return otherBrowser(ctx);
  if (!await ctx.deps.store.takeSignIn(signIn)) return alreadyUsed(ctx);

  const error = params.get("error");
  const code = params.get("code");
  if (error !== undefined || !code) {
    ctx.logFields.upstreamError = error === undefined
      ? "no_code"
      : /^[a-z_]{1,64}$/.test(error)
      ? error
      : "unrecognized";
    ctx.deps.metrics.signInsFinished.inc({ mode: "redirect", outcome: signInFailure(error) });
    const deviceUserCodeHash = signIn.value.deviceUserCodeHash;
    if (error === "access_denied" && deviceUserCodeHash !== undefined) {
      await denyDevice(ctx, deviceUserCodeHash, "denied at GitLab");
    }
    // The user said no upstream; anything else upstream is our problem, not the client's.
    return returnToClient(ctx, signIn.value, {
      error: error === "access_denied" ? "access_denied" : "server_error",
    });
  }
  try {
    return await complete(ctx, signIn.value, code);
  } catch (failure) {
    if (!(failure instanceof UpstreamError)) throw failure;
    ctx.deps.metrics.signInsFinished.inc({ mode: "redirect", outcome: "failed" });
    ctx.deps.logger.warn("redirect sign-in failed upstream", {
      requestId: ctx.requestId,
      code: failure.code,
    });
    return returnToClient(ctx, signIn.value, {
      error: failure.failure === "transient" ? "temporarily_unavailable" : "server_error",
    });
  }
}

/** Exchanges the upstream code, looks the user up, stores session and code, returns to the client. */
async function complete(
  ctx: SignInContext,
  signIn: SignInRecord,
  upstreamCode: string,
): Promise<Response> {
  const { store, clock } = ctx.deps;
  const { upstream } = ctx.oauth;
  const exchanged = await upstream.exchangeAuthorizationCode({
    code: upstreamCode,
    codeVerifier: signIn.upstreamVerifier ?? "",
    redirectUri: callbackUrl(ctx.baseUrl),
  });
  const tokens = upstreamTokenSet(exchanged, clock.now());
  const user = await fetchUserOrRevoke(ctx, tokens);
  if (signIn.deviceUserCodeHash !== undefined) {
    return await completeDeviceSignIn(ctx, signIn.deviceUserCodeHash, tokens, user);
  }
  const admission = await orRevoke(
    ctx,
    tokens,
    "access check failed",
    () => admitSignIn(ctx, tokens, user, signIn.resource),
  );
  if (admission.kind === "refused") return refusalPage(ctx, signIn, admission.message);
  const completion = await storeSignIn(
    ctx,
    signIn,
    { tokens, user, access: admission.access },
    (completion) =>
      orRevoke(ctx, tokens, "sign-in not stored", () => store.completeSignIn(completion)),
  );
  if (!completion) {
    await revokeAbandonedUpstreamTokens(ctx, tokens, "sign-in not stored");
    throw new OAuthError(500, "server_error", "Failed to store the sign-in");
  }
  return returnToClient(ctx, signIn, { code: completion.code });
}
