/**
 * The page of one device authorization at `/device`: which application asks, for what, and the
 * warning, with "Continue" (before the upstream sign-in) or Approve / Deny (after it).
 */

import { profileFor } from "../server_scopes.ts";
import { OAuthError } from "../../http/errors.ts";
import { PATHS } from "../../http/paths.ts";
import type { RenderedPage } from "../../pages/mod.ts";
import { readCookie, signInCookies } from "../cookies.ts";
import type { SignInContext } from "../deps.ts";
import type { DeviceAuthorizationRecord } from "../../store/records.ts";
import { type DeviceClient, identifyDeviceClient } from "./client.ts";
import { deviceCsrfToken } from "./sign_in.ts";

/** What every session grants, in words (sessions get both scopes, spec §1.6). */
const ACCESS_IN_WORDS = "to use its tools and read its resources";

/**
 * The authorization's page for the browser `browser` (its binding cookie's value; read from
 * the request when not given), with `headers` (a new binding cookie) added.
 */
export async function authorizationPage(
  ctx: SignInContext,
  device: DeviceAuthorizationRecord,
  shown: { userCode?: string; signedInAs?: string; browser?: string },
  headers = new Headers(),
): Promise<Response> {
  const browser = shown.browser ?? readCookie(ctx.request, signInCookies(ctx.baseUrl).browser) ??
    "";
  const client = await clientShown(ctx, device.clientId);
  const page = ctx.deps.templates.renderCodeRequestPage({
    userCode: shown.userCode,
    signedInAs: shown.signedInAs,
    clientId: device.clientId,
    clientName: client.clientName,
    clientVerifiedHost: client.verifiedHost,
    clientRegistered: client.registration !== undefined,
    access: ACCESS_IN_WORDS,
    resource: device.resource,
    upstream: profileFor(ctx, device.resource),
    actionUrl: `${ctx.baseUrl}${PATHS.device}`,
    deviceId: device.userCodeHash,
    csrfToken: deviceCsrfToken(browser, device.userCodeHash),
  });
  return htmlPage(page, 200, headers);
}

/** The client as the sign-in pages show it; one gone since issuance shows as unknown. */
async function clientShown(ctx: SignInContext, clientId: string): Promise<DeviceClient> {
  try {
    return await identifyDeviceClient(ctx.deps, clientId);
  } catch (error) {
    if (!(error instanceof OAuthError)) throw error;
    return {};
  }
}

/** An HTML page, never cached, no referrer. */
export function htmlPage(page: RenderedPage, status: number, headers = new Headers()): Response {
  headers.set("Content-Type", "text/html; charset=utf-8");
  headers.set("Content-Security-Policy", page.contentSecurityPolicy);
  headers.set("Cache-Control", "no-store");
  headers.set("Referrer-Policy", "no-referrer");
  return new Response(page.html, { status, headers });
}
