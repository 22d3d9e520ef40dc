/**
 * `GET /device` (RFC 8628 §3.3): where the user of a device authorization enters its user code
 * (typed in any case, with or without the dash; `?user_code=` fills it in), then sees which
 * application asks, for what, and a warning, before signing in. A code is bound to the first
 * browser that enters it; another browser reads that it is in use, and nothing of the client.
 * Wrong codes are limited per client address (`device_authorization/wrong_codes.ts`).
 *
 * @see README.md "Headless clients: device authorization"
 */

import { sha256Base64Url, timingSafeEqual } from "../crypto.ts";
import { identifyDeviceClient } from "../device_authorization/client.ts";
import { normalizeUserCode } from "../device_authorization/user_code.ts";
import { countWrongCode, refuseAfterWrongCodes } from "../device_authorization/wrong_codes.ts";
import { OAuthError } from "../http/errors.ts";
import { singleValued } from "../http/params.ts";
import { PATHS } from "../http/paths.ts";
import type { RenderedPage } from "../pages/mod.ts";
import { readCookie, signInCookies } from "../sign_in/cookies.ts";
import type { SignInContext } from "../sign_in/deps.ts";
import { bindBrowser, notice } from "../sign_in/redirect_flow.ts";
import type { Versioned } from "../store/mod.ts";
import type { DeviceAuthorizationRecord } from "../store/records.ts";

/** What every session grants, in words (sessions get both scopes, spec §1.6). */
const ACCESS_IN_WORDS = "to use its tools and read its resources";

/** Handles `GET /device`. */
export async function handleDevice(ctx: SignInContext): Promise<Response> {
  const typed = singleValued(ctx.url.searchParams).get("user_code");
  const client = ctx.limitedClient();
  await refuseAfterWrongCodes(ctx.deps, client);
  if (typed === undefined) return entryPage(ctx, 200);
  const userCode = normalizeUserCode(typed);
  const device = userCode === undefined
    ? null
    : await ctx.deps.store.getDeviceAuthorizationByUserCode(userCode);
  if (!userCode || !device || device.value.status !== "pending") {
    await countWrongCode(ctx.deps, client);
    return entryPage(ctx, 400, "That code is not valid, or has expired. Check it on your device.");
  }
  const headers = new Headers();
  if (!await isThisBrowsers(ctx, userCode, device, headers)) return inUse(ctx);
  return await requestPage(ctx, userCode, device.value, headers);
}

/**
 * Whether the code is this browser's: the first browser to enter it binds it (its cookie set
 * on `headers` when new); any other is refused.
 */
async function isThisBrowsers(
  ctx: SignInContext,
  userCode: string,
  device: Versioned<DeviceAuthorizationRecord>,
  headers: Headers,
): Promise<boolean> {
  const cookies = signInCookies(ctx.baseUrl);
  for (let current: typeof device | null = device; current;) {
    const bound = current.value.browserHash;
    if (bound !== undefined) {
      const value = readCookie(ctx.request, cookies.browser);
      return value !== undefined && timingSafeEqual(sha256Base64Url(value), bound);
    }
    const browser = bindBrowser(ctx.request, cookies, headers);
    const taken = await ctx.deps.store.updateDeviceAuthorization(current, {
      ...current.value,
      browserHash: sha256Base64Url(browser),
    });
    if (taken) return true;
    // Another browser, or a poll, changed it first: judge by what is stored now.
    headers.delete("Set-Cookie");
    current = await ctx.deps.store.getDeviceAuthorizationByUserCode(userCode);
  }
  return false;
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

async function requestPage(
  ctx: SignInContext,
  userCode: string,
  device: DeviceAuthorizationRecord,
  headers: Headers,
): Promise<Response> {
  let client;
  try {
    client = await identifyDeviceClient(ctx.deps, device.clientId);
  } catch (error) {
    // Accepted at issuance, gone since (a registration that expired): shown as unknown.
    if (!(error instanceof OAuthError)) throw error;
    client = {};
  }
  const page = ctx.deps.templates.renderCodeRequestPage({
    userCode,
    clientId: device.clientId,
    clientName: client.clientName,
    clientVerifiedHost: client.verifiedHost,
    clientRegistered: client.registration !== undefined,
    access: ACCESS_IN_WORDS,
    resource: device.resource,
    upstream: ctx.oauth.upstream.profile,
  });
  return html(page, 200, headers);
}

function entryPage(ctx: SignInContext, status: number, message?: string): Response {
  const page = ctx.deps.templates.renderCodeEntryPage({
    entryUrl: `${ctx.baseUrl}${PATHS.device}`,
    message,
  });
  return html(page, status);
}

function html(page: RenderedPage, status: number, headers = new Headers()): Response {
  headers.set("Content-Type", "text/html; charset=utf-8");
  headers.set("Content-Security-Policy", page.contentSecurityPolicy);
  headers.set("Cache-Control", "no-store");
  headers.set("Referrer-Policy", "no-referrer");
  return new Response(page.html, { status, headers });
}
