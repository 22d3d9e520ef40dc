/**
 * The user's sign-in at `/device`, on the service's redirect sign-in: "Continue" sends the
 * browser to the upstream with a sign-in step marked for the device authorization; the callback
 * (after the allow-lists) stores the session with the authorization (`signed_in`) instead of
 * returning a code, and shows Approve / Deny; the user's word marks it `approved` (redeemed
 * once at `/token`) or `denied`. Forms carry a CSRF token bound to the browser's cookie.
 */

import { sha256Base64Url, timingSafeEqual } from "../../crypto.ts";
import { PATHS } from "../../http/paths.ts";
import { readCookie, signInCookies } from "../cookies.ts";
import type { SignInContext, SignInRequestContext } from "../deps.ts";
import { PKCE_METHOD } from "../pkce.ts";
import { sendUpstream, SIGN_IN_STEP_TTL_MS } from "../redirect_flow.ts";
import type { Versioned } from "../../store/mod.ts";
import type { DeviceAuthorizationRecord, SignInRecord } from "../../store/records.ts";
import type { SignInRequest } from "../../session/life.ts";

/** Attempts at a transition that the client's polls (which touch the record) may race. */
const ATTEMPTS = 5;

/** The CSRF token of `/device`'s forms for the authorization `deviceId` in this browser. */
export function deviceCsrfToken(browser: string, deviceId: string): string {
  return sha256Base64Url(`device-form:${browser}:${deviceId}`);
}

/** Whether the request carries this browser's cookie and the form's CSRF token for `deviceId`. */
export function isDeviceForm(
  ctx: SignInRequestContext,
  device: DeviceAuthorizationRecord,
  csrfToken: string | undefined,
): boolean {
  const browser = readCookie(ctx.request, signInCookies(ctx.baseUrl).browser);
  if (browser === undefined || csrfToken === undefined || device.browserHash === undefined) {
    return false;
  }
  return timingSafeEqual(sha256Base64Url(browser), device.browserHash) &&
    timingSafeEqual(csrfToken, deviceCsrfToken(browser, device.userCodeHash));
}

/** "Continue": the browser goes to the upstream's sign-in for this authorization. */
export async function continueUpstream(
  ctx: SignInContext,
  device: DeviceAuthorizationRecord,
): Promise<Response> {
  const { clock } = ctx.deps;
  const signIn: SignInRecord = {
    ...signInRequestOf(device),
    state: "",
    redirectUri: `${ctx.baseUrl}${PATHS.device}`,
    browserHash: device.browserHash ?? "",
    expiresAt: clock.now() + SIGN_IN_STEP_TTL_MS,
    deviceUserCodeHash: device.userCodeHash,
  };
  ctx.deps.metrics.signInsStarted.inc({ mode: "redirect" });
  return await sendUpstream(ctx, signIn, new Headers());
}

/** What a device authorization's sign-in asks, as a sign-in request (no code will be issued). */
export function signInRequestOf(device: DeviceAuthorizationRecord): SignInRequest {
  return {
    clientId: device.clientId,
    codeChallenge: "",
    codeChallengeMethod: PKCE_METHOD,
    resource: device.resource,
  };
}

/**
 * Applies `change` to the authorization of `userCodeHash` as it is now, when `allowed` by its
 * status; retried when a poll touched it meanwhile. The record as changed, or null.
 */
export async function changeDeviceAuthorization(
  ctx: SignInRequestContext,
  userCodeHash: string,
  allowed: readonly DeviceAuthorizationRecord["status"][],
  change: (device: Versioned<DeviceAuthorizationRecord>) => Promise<boolean>,
): Promise<DeviceAuthorizationRecord | null> {
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const device = await ctx.deps.store.getDeviceAuthorizationOfUserCodeHash(userCodeHash);
    if (!device || !allowed.includes(device.value.status)) return null;
    if (await change(device)) return device.value;
  }
  return null;
}
