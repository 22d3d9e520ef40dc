/**
 * The redirect sign-in (GITLAB_SIGN_IN=redirect), the steps the routes share: `/authorize`
 * answers our consent page (or, with a remembered consent, goes straight upstream); "Continue"
 * sends the browser to the upstream's authorization page with a fresh `state` and PKCE S256;
 * the callback completes the sign-in; every outcome returns to the client's `redirect_uri`
 * with `iss` (RFC 9207). Each step is a single-use KV record that lives 10 minutes, bound to
 * the browser that started it by an HttpOnly cookie (login CSRF).
 *
 * @see RFC 6749 §4.1 and §10.12, RFC 7636, RFC 9207, MCP security best practices (consent)
 */

import { profileFor, scopesFor } from "./server_scopes.ts";
import { PATHS } from "../http/paths.ts";
import type { SignInContext, SignInRequestContext } from "./deps.ts";
import { randomToken, sha256Base64Url, timingSafeEqual } from "../crypto.ts";
import { PKCE_METHOD } from "./pkce.ts";
import type { Versioned } from "../store/mod.ts";
import type { SignInRecord } from "../store/records.ts";
import type { RenderedPage } from "../pages/mod.ts";
import { clientReturnUrl, isFollowableRedirect } from "../clients/return_url.ts";
import { errorDescription } from "../http/errors.ts";
import type { ConsentGrant } from "./consent_signer.ts";
import {
  CONSENT_MAX_AGE_SECONDS,
  readCookie,
  type SignInCookies,
  signInCookies,
} from "./cookies.ts";

/** How long each step (consent page, upstream round trip) may take. */
export const SIGN_IN_STEP_TTL_MS = 10 * 60 * 1000;

/** What `/authorize` validated, as far as the redirect sign-in needs it. */
export interface RedirectSignInRequest {
  clientId: string;
  codeChallenge: string;
  state: string;
  redirectUri?: string;
  /** The client named none: `redirectUri` is its sole registered one. */
  redirectUriImplied?: true;
  /** The protected resource the tokens will be bound to (RFC 8707). */
  resource: string;
}

/** What the consent page says of the client, as `/authorize` identified it. */
export interface ConsentClient {
  /** Its name: from a metadata document, or from `/register` (unverified). */
  clientName?: string;
  /** The host of a metadata document client id, which vouches for the name. */
  verifiedHost?: string;
  /** Whether the client id is registered here (a nameless one is still known). */
  registered?: boolean;
}

/**
 * `GET /authorize` in redirect mode, after the spec's checks and the redirect policy: our
 * consent page, or a 302 upstream when this browser already consented to this client and
 * return address.
 */
export async function answerRedirectSignIn(
  ctx: SignInContext,
  request: RedirectSignInRequest,
  client: ConsentClient,
): Promise<Response> {
  const { store, clock, templates } = ctx.deps;
  const redirectUri = request.redirectUri;
  if (!redirectUri || !isFollowableRedirect(redirectUri)) {
    return notice(ctx, 400, "Sign-in failed", "The application named no address to return to.");
  }
  ctx.deps.metrics.signInsStarted.inc({ mode: "redirect" });
  const cookies = signInCookies(ctx.baseUrl);
  const headers = new Headers();
  const browser = bindBrowser(ctx.request, cookies, headers);
  const signIn: SignInRecord = {
    clientId: request.clientId,
    codeChallenge: request.codeChallenge,
    codeChallengeMethod: PKCE_METHOD,
    state: request.state,
    redirectUri,
    ...(request.redirectUriImplied ? { redirectUriImplied: true } : {}),
    resource: request.resource,
    browserHash: sha256Base64Url(browser),
    expiresAt: clock.now() + SIGN_IN_STEP_TTL_MS,
  };
  if (hasConsented(ctx, cookies, consentGrantOf(ctx, signIn))) {
    return await sendUpstream(ctx, signIn, headers);
  }
  const signInId = randomToken();
  const csrfToken = randomToken();
  await store.createSignIn(signInId, { ...signIn, csrfHash: sha256Base64Url(csrfToken) });
  const page = templates.renderConsentPage({
    clientId: request.clientId,
    clientName: client.clientName,
    clientVerifiedHost: client.verifiedHost,
    clientRegistered: client.registered,
    redirectUri,
    signInId,
    csrfToken,
    actionUrl: `${ctx.baseUrl}${PATHS.consent}`,
    upstream: profileFor(ctx, request.resource),
  });
  return htmlResponse(page, 200, headers);
}

/**
 * Sends the browser upstream: a fresh `state` and PKCE verifier, kept in a new step record
 * (taking `previous`, the consent step, in the same commit when given). The consent step taken
 * by someone else first answers the 400 page.
 */
export async function sendUpstream(
  ctx: SignInContext,
  signIn: SignInRecord,
  headers: Headers,
  previous?: Versioned<SignInRecord>,
): Promise<Response> {
  const { store, clock } = ctx.deps;
  const state = randomToken();
  const verifier = randomToken();
  const { csrfHash: _spent, ...request } = signIn;
  const next = {
    ...request,
    upstreamVerifier: verifier,
    expiresAt: clock.now() + SIGN_IN_STEP_TTL_MS,
  };
  if (previous) {
    if (!await store.takeSignIn(previous, { id: state, signIn: next })) return alreadyUsed(ctx);
  } else {
    await store.createSignIn(state, next);
  }
  const location = ctx.oauth.upstream.authorizationUrl({
    redirectUri: callbackUrl(ctx.baseUrl),
    state,
    codeChallenge: sha256Base64Url(verifier),
    scopes: scopesFor(ctx, signIn.resource),
  });
  headers.set("Location", location.href);
  headers.set("Cache-Control", "no-store");
  return new Response(null, { status: 302, headers });
}

/** `{base}/oauth/callback`: the redirect URI registered with the upstream application. */
export function callbackUrl(baseUrl: string): string {
  return `${baseUrl}${PATHS.callback}`;
}

/** Remembers this browser's consent to the client and return address for 30 days. */
export function rememberConsent(
  ctx: SignInContext,
  signIn: SignInRecord,
  headers: Headers,
): void {
  const cookies = signInCookies(ctx.baseUrl);
  const expiresAt = ctx.deps.clock.now() + CONSENT_MAX_AGE_SECONDS * 1000;
  const value = ctx.oauth.consentSigner.sign(consentGrantOf(ctx, signIn), expiresAt);
  headers.append(
    "Set-Cookie",
    cookies.setCookie(
      cookies.consentName(signIn.clientId, signIn.redirectUri),
      value,
      CONSENT_MAX_AGE_SECONDS,
    ),
  );
}

/** The step record `id` names, when it is live and of the wanted step; else null. */
export async function liveStep(
  ctx: SignInRequestContext,
  id: string | undefined,
  step: "consent" | "upstream",
): Promise<Versioned<SignInRecord> | null> {
  if (!id) return null;
  const found = await ctx.deps.store.getSignIn(id);
  if (!found || ctx.deps.clock.now() > found.value.expiresAt) return null;
  const wanted = step === "consent" ? found.value.csrfHash : found.value.upstreamVerifier;
  return wanted === undefined ? null : found;
}

/** Whether the request comes from the browser the sign-in was started in (its cookie). */
export function isSameBrowser(ctx: SignInRequestContext, signIn: SignInRecord): boolean {
  const value = readCookie(ctx.request, signInCookies(ctx.baseUrl).browser);
  return value !== undefined && timingSafeEqual(sha256Base64Url(value), signIn.browserHash);
}

/** Whether `token` is the CSRF token the consent page of `signIn` carried. */
export function isCsrfToken(signIn: SignInRecord, token: string | undefined): boolean {
  return token !== undefined && signIn.csrfHash !== undefined &&
    timingSafeEqual(sha256Base64Url(token), signIn.csrfHash);
}

/**
 * The 302 back to the client (RFC 6749 §4.1.2 and §4.1.2.1): `params` (a code, or an error),
 * then `state` when the request had one, then `iss` (RFC 9207).
 */
export function returnToClient(
  ctx: SignInRequestContext,
  signIn: SignInRecord,
  params: Record<string, string>,
  headers = new Headers(),
): Response {
  const location = clientReturnUrl(signIn.redirectUri, params, signIn.state, ctx.baseUrl);
  headers.set("Location", location.href);
  headers.set("Cache-Control", "no-store");
  return new Response(null, { status: 302, headers });
}

/**
 * The page of a user this service refused (ALLOWED_GITLAB_GROUPS, ALLOWED_GITLAB_USERS): who
 * and why, and a link (never followed on its own) back to the client with `access_denied`, the
 * same words as `error_description`, `state` and `iss`. A 302 would leave the user with the
 * client's generic error.
 */
export function refusalPage(
  ctx: SignInRequestContext,
  signIn: SignInRecord,
  message: string,
): Response {
  const returnUrl = isFollowableRedirect(signIn.redirectUri)
    ? clientReturnUrl(
      signIn.redirectUri,
      { error: "access_denied", error_description: errorDescription(message) },
      signIn.state,
      ctx.baseUrl,
    ).href
    : undefined;
  return notice(ctx, 403, "Sign-in refused by this service", message, returnUrl);
}

/** The 400 page for a step that is unknown, expired or already used. */
export function alreadyUsed(ctx: SignInRequestContext): Response {
  return notice(
    ctx,
    400,
    "Sign-in expired",
    "This sign-in is unknown, expired or already used. Start again from the application.",
  );
}

/** The 400 page for a step that arrives from another browser, or without its token (CSRF). */
export function otherBrowser(ctx: SignInRequestContext): Response {
  return notice(
    ctx,
    400,
    "Sign-in refused",
    "This sign-in was not started in this browser, or the request did not come from its page " +
      "(possible cross-site request forgery). Start again from the application.",
  );
}

/** A notice page. */
export function notice(
  ctx: SignInRequestContext,
  status: number,
  title: string,
  message: string,
  returnUrl?: string,
): Response {
  return htmlResponse(ctx.deps.templates.renderNoticePage({ title, message, returnUrl }), status);
}

function htmlResponse(page: RenderedPage, status: number, headers = new Headers()): Response {
  headers.set("Content-Type", "text/html; charset=utf-8");
  headers.set("Content-Security-Policy", page.contentSecurityPolicy);
  headers.set("Cache-Control", "no-store");
  headers.set("Referrer-Policy", "no-referrer");
  return new Response(page.html, { status, headers });
}

/** The browser's binding cookie, set on `headers` when the browser has none yet. */
export function bindBrowser(request: Request, cookies: SignInCookies, headers: Headers): string {
  const existing = readCookie(request, cookies.browser);
  if (existing && /^[A-Za-z0-9_-]{43}$/.test(existing)) return existing;
  const value = randomToken();
  headers.append("Set-Cookie", cookies.setCookie(cookies.browser, value));
  return value;
}

function hasConsented(
  ctx: SignInContext,
  cookies: SignInCookies,
  grant: ConsentGrant,
): boolean {
  const value = readCookie(ctx.request, cookies.consentName(grant.clientId, grant.redirectUri));
  return value !== undefined &&
    ctx.oauth.consentSigner.verify(value, grant, ctx.deps.clock.now());
}

/** What the consent page of `signIn` shows: its server's GitLab scopes now, the resource. */
function consentGrantOf(ctx: SignInContext, signIn: SignInRecord): ConsentGrant {
  return {
    clientId: signIn.clientId,
    redirectUri: signIn.redirectUri,
    scopes: scopesFor(ctx, signIn.resource),
    resource: signIn.resource ?? "",
  };
}
