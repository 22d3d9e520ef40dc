/**
 * `POST /oauth/consent` (GITLAB_SIGN_IN=redirect): the consent page's form. "Continue with
 * GitLab" remembers the consent and sends the browser upstream; "Cancel" returns to the client
 * with `access_denied`. The form must carry the page's CSRF token and come from the browser
 * the sign-in was started in; the consent step is single use.
 *
 * @see RFC 6749 §4.1.2.1 and §10.12, MCP security best practices (per-client consent)
 */

import type { SignInContext } from "../sign_in/deps.ts";
import { readParams } from "../http/params.ts";
import {
  alreadyUsed,
  isCsrfToken,
  isSameBrowser,
  liveStep,
  notice,
  otherBrowser,
  rememberConsent,
  returnToClient,
  sendUpstream,
} from "../sign_in/redirect_flow.ts";

/** Handles `POST /oauth/consent`. */
export async function handleConsent(ctx: SignInContext): Promise<Response> {
  // A form post: the body limits of readParams apply, and the content type must be a form's.
  const params = await readParams(ctx.request, ctx.deps.config.requestBodyTimeoutMs);
  const signIn = await liveStep(ctx, params.get("sign_in"), "consent");
  if (!signIn) return alreadyUsed(ctx);
  if (!isSameBrowser(ctx, signIn.value) || !isCsrfToken(signIn.value, params.get("csrf_token"))) {
    return otherBrowser(ctx);
  }
  const action = params.get("action");
  if (action === "cancel") {
    if (!await ctx.deps.store.takeSignIn(signIn)) return alreadyUsed(ctx);
    ctx.deps.metrics.signInsFinished.inc({ mode: "redirect", outcome: "denied" });
    return returnToClient(ctx, signIn.value, { error: "access_denied" });
  }
  if (action !== "continue") {
    const { displayName } = ctx.oauth.upstream.profile;
    return notice(ctx, 400, "Sign-in failed", `Choose Continue with ${displayName} or Cancel.`);
  }
  const headers = new Headers();
  rememberConsent(ctx, signIn.value, headers);
  return await sendUpstream(ctx, signIn.value, headers, signIn);
}
