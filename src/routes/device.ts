/**
 * `/device` (RFC 8628 §3.3), the user's side of a device authorization. `GET`: the user enters
 * the user code (any case, with or without the dash; `?user_code=` fills it in) and sees which
 * application asks, for what, and a warning; a code is bound to the first browser that enters
 * it, another browser reads that it is in use, and nothing of the client; wrong codes are
 * limited per client address (`sign_in/device_authorization/wrong_codes.ts`). Back from a failed
 * GitLab sign-in it says what happened (`sign_in/device_authorization/failure_message.ts`).
 * `POST`: the page's form (CSRF token bound to the browser): "Continue" to the upstream
 * sign-in, then Approve / Deny.
 *
 * @see docs/mcp-clients.md "Headless clients: device authorization"
 */

import { sha256Base64Url, timingSafeEqual } from "../crypto.ts";
import { auditDeviceAuthorization } from "../sign_in/device_authorization/audit.ts";
import { authorizationPage, htmlPage } from "../sign_in/device_authorization/page.ts";
import {
  changeDeviceAuthorization,
  continueUpstream,
  isDeviceForm,
} from "../sign_in/device_authorization/sign_in.ts";
import { continueWithDeviceFlow } from "../sign_in/device_authorization/continue_device_flow.ts";
import { identifyDeviceClient } from "../sign_in/device_authorization/client.ts";
import {
  deviceFlowFailureMessage,
  signInFailureMessage,
} from "../sign_in/device_authorization/failure_message.ts";
import { isUserCodeHash, normalizeUserCode } from "../sign_in/device_authorization/user_code.ts";
import {
  countCodeAttempt,
  refuseAfterWrongCodes,
} from "../sign_in/device_authorization/wrong_codes.ts";
import type { LimitedClient } from "../http/limited_client.ts";
import { readParams, singleValued } from "../http/params.ts";
import { PATHS } from "../http/paths.ts";
import { enforceRateLimit } from "../http/rate_limit.ts";
import { readCookie, signInCookies } from "../sign_in/cookies.ts";
import type { SignInContext } from "../sign_in/deps.ts";
import { bindBrowser, notice, otherBrowser } from "../sign_in/redirect_flow.ts";
import type { Versioned } from "../store/mod.ts";
import type { DeviceAuthorizationRecord, SessionRecord } from "../store/records.ts";
import { revokeUpstreamTokens } from "../session/end.ts";

/** Handles `GET /device`. */
export async function handleDevice(ctx: SignInContext): Promise<Response> {
  const query = singleValued(ctx.url.searchParams);
  const typed = query.get("user_code");
  const client = ctx.limitedClient();
  await refuseAfterWrongCodes(ctx.deps, client);
  const signedIn = query.get("code");
  const failed = query.get("error");
  if (typed === undefined && signedIn !== undefined) {
    return await afterDeviceFlow(ctx, signedIn, client, failed !== undefined);
  }
  if (typed === undefined && failed !== undefined) {
    return entryPage(ctx, 200, signInFailureMessage(failed));
  }
  if (typed === undefined) return entryPage(ctx, 200);
  const attempt = await countCodeAttempt(ctx.deps, client);
  const userCode = normalizeUserCode(typed);
  const device = userCode === undefined
    ? null
    : await ctx.deps.store.getDeviceAuthorizationByUserCode(userCode);
  if (!userCode || !device || device.value.status !== "pending") {
    return entryPage(ctx, 400, "That code is not valid, or has expired. Check it on your device.");
  }
  await attempt.wasRight();
  const headers = new Headers();
  const browser = await thisBrowsers(ctx, userCode, device, headers);
  if (browser === undefined) return inUse(ctx);
  return await authorizationPage(ctx, device.value, { userCode, browser }, headers);
}

/**
 * Back from GitLab's device flow (its page sends the browser here with `code`, the
 * authorization's id): Approve / Deny, for the browser the code is bound to; after a `failed`
 * sign-in (its page's return link adds `error`), what happened, read from the authorization.
 * That id is the user code's hash, which anyone can compute from a guess: one naming no
 * signed-in authorization (or, after a failure, none bound to this browser) is a wrong code.
 */
async function afterDeviceFlow(
  ctx: SignInContext,
  deviceId: string,
  client: LimitedClient,
  failed: boolean,
): Promise<Response> {
  const attempt = await countCodeAttempt(ctx.deps, client);
  const device = await authorizationNamed(ctx, deviceId);
  const failure = failed && device && isBoundHere(ctx, device.value)
    ? deviceFlowFailureMessage(device.value.status)
    : undefined;
  if (failure !== undefined) {
    await attempt.wasRight();
    return entryPage(ctx, 200, failure);
  }
  if (!device || device.value.status !== "signed_in" || device.value.sessionId === undefined) {
    return expired(ctx);
  }
  await attempt.wasRight();
  if (!isBoundHere(ctx, device.value)) return inUse(ctx);
  const session = await ctx.deps.store.getSession(device.value.sessionId);
  if (!session) return expired(ctx);
  return await authorizationPage(ctx, device.value, { signedInAs: session.value.upstreamUsername });
}

/** The live authorization a form's `device` or a link's `code` names (its user code's hash). */
function authorizationNamed(
  ctx: SignInContext,
  deviceId: string,
): Promise<Versioned<DeviceAuthorizationRecord> | null> {
  return isUserCodeHash(deviceId)
    ? ctx.deps.store.getDeviceAuthorizationOfUserCodeHash(deviceId)
    : Promise.resolve(null);
}

/** Whether the authorization is bound to the browser of this request (its cookie). */
function isBoundHere(ctx: SignInContext, device: DeviceAuthorizationRecord): boolean {
  const browser = readCookie(ctx.request, signInCookies(ctx.baseUrl).browser);
  const bound = device.browserHash;
  return !!browser && !!bound && timingSafeEqual(sha256Base64Url(browser), bound);
}

/** Handles `POST /device`: the page's "Continue", "Approve" or "Deny". */
export async function handleDeviceForm(ctx: SignInContext): Promise<Response> {
  const params = await readParams(ctx.request, ctx.deps.config.requestBodyTimeoutMs);
  const attempt = await countCodeAttempt(ctx.deps, ctx.limitedClient());
  const deviceId = params.get("device") ?? "";
  const device = await authorizationNamed(ctx, deviceId);
  if (!device) return expired(ctx);
  await attempt.wasRight();
  if (!isDeviceForm(ctx, device.value, params.get("csrf_token"))) return otherBrowser(ctx);
  const action = params.get("action");
  if (action === "continue" && device.value.status === "pending") {
    // Each Continue stores a sign-in step (or starts a GitLab device flow): counted as the
    // consent form's Continue is.
    await enforceRateLimit(ctx.deps, "poll", ctx.limitedClient());
    if (ctx.deps.config.upstream.signIn === "redirect") {
      return await continueUpstream(ctx, device.value);
    }
    const client = await identifyDeviceClient(ctx.deps, device.value.clientId).catch(() => ({}));
    return await continueWithDeviceFlow(ctx, device.value, client);
  }
  if (action === "approve" || action === "deny") return await decide(ctx, deviceId, action);
  return expired(ctx);
}

/**
 * The user's word after signing in: the authorization approved or denied, once. A denial ends
 * the sign-in's session at once and revokes its GitLab token (the sweep of unredeemed sign-ins
 * runs only when some later sign-in completes).
 */
async function decide(
  ctx: SignInContext,
  deviceId: string,
  action: "approve" | "deny",
): Promise<Response> {
  const { store } = ctx.deps;
  const status = action === "approve" ? "approved" : "denied";
  let ended: SessionRecord | undefined;
  const decided = await changeDeviceAuthorization(
    ctx,
    deviceId,
    ["signed_in"],
    async (device) => {
      if (status === "approved") {
        return !!await store.updateDeviceAuthorization(device, { ...device.value, status });
      }
      const sessionId = device.value.sessionId;
      const session = sessionId === undefined ? null : await store.getSession(sessionId);
      if (!session) {
        return !!await store.updateDeviceAuthorization(device, { ...device.value, status });
      }
      if (!await store.denySignedInDeviceAuthorization(device, session)) return false;
      ended = session.value;
      return true;
    },
  );
  if (!decided) return expired(ctx);
  auditDeviceAuthorization(ctx.deps, status, decided.clientId, ctx.requestId);
  if (ended) {
    const deps = { ...ctx.deps, upstream: ctx.oauth.upstream };
    await revokeUpstreamTokens(deps, ended, { requestId: ctx.requestId, sessionId: ended.id });
  }
  return action === "approve"
    ? notice(ctx, 200, "Device signed in", "You may return to your device: it is signed in now.")
    : notice(ctx, 200, "Sign-in denied", "Your device was not signed in. You may close this page.");
}

/**
 * This browser's binding value when the code is its: the first browser to enter it binds it
 * (its cookie set on `headers` when new); any other gets undefined.
 */
async function thisBrowsers(
  ctx: SignInContext,
  userCode: string,
  device: Versioned<DeviceAuthorizationRecord>,
  headers: Headers,
): Promise<string | undefined> {
  const cookies = signInCookies(ctx.baseUrl);
  for (let current: typeof device | null = device; current;) {
    const bound = current.value.browserHash;
    if (bound !== undefined) {
      const value = readCookie(ctx.request, cookies.browser);
      return value !== undefined && timingSafeEqual(sha256Base64Url(value), bound)
        ? value
        : undefined;
    }
    const browser = bindBrowser(ctx.request, cookies, headers);
    const taken = await ctx.deps.store.updateDeviceAuthorization(current, {
      ...current.value,
      browserHash: sha256Base64Url(browser),
    });
    if (taken) return browser;
    // Another browser, or a poll, changed it first: judge by what is stored now.
    headers.delete("Set-Cookie");
    current = await ctx.deps.store.getDeviceAuthorizationByUserCode(userCode);
  }
  return undefined;
}

function inUse(ctx: SignInContext): Response {
  return notice(
    ctx,
    409,
    "Code in use",
    "This code has already been entered in another browser. If you did not do that, " +
      "someone else may be using it: start again on your device.",
  );
}

function expired(ctx: SignInContext): Response {
  return notice(
    ctx,
    400,
    "Code expired",
    "This code is unknown, expired or already used. Start again on your device.",
  );
}

function entryPage(ctx: SignInContext, status: number, message?: string): Response {
  const page = ctx.deps.templates.renderCodeEntryPage({
    entryUrl: `${ctx.baseUrl}${PATHS.device}`,
    message,
  });
  return htmlPage(page, status);
}
