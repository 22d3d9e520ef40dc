/**
 * The upstream vouched for the user of a `/device` sign-in: the allow-lists decide (a refused
 * user's device gets `access_denied`), then the session is stored with the authorization
 * (`signed_in`) by the same completion every sign-in uses, and the user is asked Approve / Deny.
 */

import { admitSignIn } from "../sign_in/admission.ts";
import { revokeAbandonedUpstreamTokens, storeSignIn } from "../sign_in/completion.ts";
import type { SignInContext } from "../sign_in/deps.ts";
import { alreadyUsed, notice } from "../sign_in/redirect_flow.ts";
import type { UpstreamTokenSet } from "../store/records.ts";
import type { UpstreamUser } from "../upstream/types.ts";
import { auditDeviceAuthorization } from "./audit.ts";
import { authorizationPage } from "./page.ts";
import { changeDeviceAuthorization, signInRequestOf } from "./sign_in.ts";

/** Completes the sign-in of the authorization whose user code hashes to `userCodeHash`. */
export async function completeDeviceSignIn(
  ctx: SignInContext,
  userCodeHash: string,
  tokens: UpstreamTokenSet,
  user: UpstreamUser,
): Promise<Response> {
  const { store } = ctx.deps;
  const device = await store.getDeviceAuthorizationOfUserCodeHash(userCodeHash);
  if (!device || device.value.status !== "pending") {
    await revokeAbandonedUpstreamTokens(ctx, tokens, "device authorization gone");
    return alreadyUsed(ctx);
  }
  const admission = await admitSignIn(ctx, tokens, user);
  if (admission.kind === "refused") {
    const denied = await changeDeviceAuthorization(
      ctx,
      userCodeHash,
      ["pending"],
      async (current) =>
        !!await store.updateDeviceAuthorization(current, { ...current.value, status: "denied" }),
    );
    if (denied) {
      auditDeviceAuthorization(ctx.deps, "denied", denied.clientId, ctx.requestId, {
        reason: "refused by the allow-lists",
      });
    }
    return notice(
      ctx,
      403,
      "Sign-in refused by this service",
      `${admission.message} Your device is told that access was denied.`,
    );
  }
  const completion = await storeSignIn(
    ctx,
    signInRequestOf(device.value),
    { tokens, user, access: admission.access },
    async (done) =>
      !!await changeDeviceAuthorization(
        ctx,
        userCodeHash,
        ["pending"],
        (current) => store.approveDeviceAuthorization(current, done.session, "signed_in"),
      ),
  );
  if (!completion) {
    await revokeAbandonedUpstreamTokens(ctx, tokens, "device authorization gone");
    return alreadyUsed(ctx);
  }
  return await authorizationPage(ctx, device.value, { signedInAs: user.username });
}
