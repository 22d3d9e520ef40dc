/**
 * The redirect sign-in's callback for a `/device` sign-in: the allow-lists decide (a refused
 * user reads why, and the device's poll gets `access_denied`), then the session is stored with
 * the authorization and the user is asked Approve / Deny.
 */

import { admitSignIn } from "../admission.ts";
import { orRevoke } from "../completion.ts";
import type { SignInContext } from "../deps.ts";
import { alreadyUsed, notice } from "../redirect_flow.ts";
import type { UpstreamTokenSet } from "../../store/records.ts";
import type { UpstreamUser } from "../../upstream/types.ts";
import { denyDevice, storeDeviceSignIn } from "./flow_sign_in.ts";
import { authorizationPage } from "./page.ts";

/** Completes the sign-in of the authorization whose user code hashes to `userCodeHash`. */
export async function completeDeviceSignIn(
  ctx: SignInContext,
  userCodeHash: string,
  tokens: UpstreamTokenSet,
  user: UpstreamUser,
): Promise<Response> {
  const authorization = await ctx.deps.store.getDeviceAuthorizationOfUserCodeHash(userCodeHash);
  const admission = await orRevoke(
    ctx,
    tokens,
    "access check failed",
    () => admitSignIn(ctx, tokens, user, authorization?.value.resource),
  );
  if (admission.kind === "refused") {
    await denyDevice(ctx, userCodeHash, "refused by the allow-lists");
    return notice(
      ctx,
      403,
      "Sign-in refused by this service",
      `${admission.message} Your device is told that access was denied.`,
    );
  }
  const vouched = { tokens, user, access: admission.access };
  // Not stored: revoked there; the store failing: here, as nothing else holds the token.
  const store = () => storeDeviceSignIn(ctx, userCodeHash, vouched);
  if (!await orRevoke(ctx, tokens, "sign-in not stored", store)) return alreadyUsed(ctx);
  const device = await ctx.deps.store.getDeviceAuthorizationOfUserCodeHash(userCodeHash);
  if (!device) return alreadyUsed(ctx);
  return await authorizationPage(ctx, device.value, { signedInAs: user.username });
}
