/**
 * The pages of the redirect sign-in (GITLAB_SIGN_IN=redirect), from `templates/sign_in.html`:
 * the consent form `GET /authorize` answers, and the notices of a refused, cancelled or failed
 * sign-in. No script at all.
 *
 * @see RFC 6749 §10.12, MCP security best practices (per-client consent)
 */

import type { UpstreamProfile } from "../upstream/types.ts";
import { clientSlots, returnTarget, type ShownClient } from "./client.ts";
import { formPagePolicy, returnSource } from "./csp.ts";
import { compile, httpUrl, type Render, withoutComments } from "./engine.ts";
import { scopeWords } from "./scopes.ts";

/** A rendered page and the Content-Security-Policy header it must be served with. */
export interface RenderedPage {
  html: string;
  contentSecurityPolicy: string;
}

/** What the consent page of the redirect sign-in (GITLAB_SIGN_IN=redirect) shows and posts. */
export interface ConsentPageValues extends ShownClient {
  /** Where the browser returns; its scheme and host are shown. */
  redirectUri: string;
  /** The pending sign-in the form continues. */
  signInId: string;
  csrfToken: string;
  /** Absolute URL the form posts to. */
  actionUrl: string;
  /**
   * How the upstream presents itself: its name, the scopes asked for, and its origin, where
   * "Continue" leads (allowed by the page's `form-action`).
   */
  upstream: UpstreamProfile;
}

/** A page that only tells something: a failed or refused sign-in. */
export interface NoticePageValues {
  title: string;
  message: string;
  /**
   * Where "Return to the application" leads (the client's redirect URI with an error, `state`
   * and `iss`), when the page offers one: never followed on its own.
   */
  returnUrl?: string;
}

/**
 * Every placeholder sign_in.html must use, and the only ones it may use. The optional ones came
 * later: a page without them lacks the unknown-client line, the upstream's name and the scopes
 * in words, but still renders everything it had.
 */
const SIGN_IN_PLACEHOLDERS = {
  escaped: [
    "nonce",
    "title",
    "message",
    "clientId",
    "clientName",
    "verifiedHost",
    "unverifiedName",
    "returnHost",
    "scopes",
    "signInId",
    "csrfToken",
    "actionUrl",
  ],
  optional: ["unknownClient", "upstreamName", "scopeWords", "returnUrl"],
  raw: [],
} as const;

type SignInSlots = Record<
  (typeof SIGN_IN_PLACEHOLDERS.escaped)[number] | (typeof SIGN_IN_PLACEHOLDERS.optional)[number],
  string
>;

/** The renderers of the consent page and the notice page. */
export interface SignInPages {
  consent(values: ConsentPageValues, nonce: string): RenderedPage;
  notice(values: NoticePageValues, nonce: string): RenderedPage;
}

/** Checks sign_in.html and returns its two renderers. */
export function compileSignInPages(html: string): SignInPages {
  const render: Render = compile(withoutComments(html), "sign_in.html", SIGN_IN_PLACEHOLDERS);
  const page = (slots: SignInSlots, policy: string) => ({
    html: render(slots),
    contentSecurityPolicy: policy,
  });
  return {
    consent: (values, nonce) => page(consentSlots(values, nonce), consentPolicy(values, nonce)),
    notice: (values, nonce) =>
      page(
        { ...NO_FORM, nonce, ...values, returnUrl: values.returnUrl ?? "" },
        formPagePolicy(nonce, []),
      ),
  };
}

const NO_FORM = {
  clientId: "",
  clientName: "",
  verifiedHost: "",
  unverifiedName: "",
  unknownClient: "",
  returnHost: "",
  upstreamName: "",
  scopes: "",
  scopeWords: "",
  signInId: "",
  csrfToken: "",
  actionUrl: "",
} as const;

function consentSlots(values: ConsentPageValues, nonce: string): SignInSlots {
  const { displayName } = values.upstream;
  return {
    nonce,
    title: `Sign in with ${displayName}`,
    message: "",
    ...clientSlots(values),
    returnHost: returnTarget(values.redirectUri),
    upstreamName: displayName,
    scopes: values.upstream.scopes,
    scopeWords: scopeWords(values.upstream.scopes, values.upstream.scopeWords),
    signInId: values.signInId,
    csrfToken: values.csrfToken,
    actionUrl: values.actionUrl,
    returnUrl: "",
  };
}

/** Forms go to our consent endpoint, the upstream, and (after Cancel) the client. */
function consentPolicy(values: ConsentPageValues, nonce: string): string {
  const upstream = new URL(httpUrl(values.upstream.url.href, "upstream.url"));
  return formPagePolicy(nonce, [
    new URL(httpUrl(values.actionUrl, "actionUrl")).origin,
    upstream.origin,
    // Chromium holds every redirect after "Continue" to form-action, and the upstream may send
    // the browser on to a sign-in provider of its own (SAML, OpenID Connect): any origin of the
    // upstream's scheme may follow.
    upstream.protocol,
    returnSource(values.redirectUri),
  ]);
}
