/**
 * The cookies of the redirect sign-in (GITLAB_SIGN_IN=redirect): the browser binding, a random
 * value that ties a sign-in to the browser that started it (login CSRF), and the remembered
 * consent, one signed cookie per client and return address. All are HttpOnly and SameSite=Lax
 * (the upstream's redirect back to our callback is a top-level GET, which Lax lets through);
 * under an https base URL they are `Secure` and `__Host-` prefixed, so no sibling host can set
 * them.
 *
 * @see RFC 6265bis §4.1.3 (cookie prefixes), MCP security best practices (per-client consent)
 */

import { consentTarget } from "./consent_signer.ts";
import { sha256Base64Url } from "../crypto.ts";

/** How long a consent is remembered: 30 days. */
export const CONSENT_MAX_AGE_SECONDS = 30 * 86_400;

/** The cookie names and attributes for a base URL. */
export interface SignInCookies {
  /** The browser binding's name. */
  browser: string;
  /** The name of the consent cookie for a client and return address. */
  consentName(clientId: string, redirectUri: string): string;
  /** A `Set-Cookie` value; without `maxAgeSeconds`, a session cookie. */
  setCookie(name: string, value: string, maxAgeSeconds?: number): string;
}

/** Names and attributes: `__Host-` and `Secure` when `baseUrl` is https. */
export function signInCookies(baseUrl: string): SignInCookies {
  const secure = baseUrl.startsWith("https:");
  const prefix = secure ? "__Host-" : "";
  return {
    browser: `${prefix}mcp-auth-browser`,
    consentName(clientId, redirectUri) {
      const id = sha256Base64Url(JSON.stringify([clientId, consentTarget(redirectUri)]))
        .slice(0, 16);
      return `${prefix}mcp-auth-consent-${id}`;
    },
    setCookie(name, value, maxAgeSeconds) {
      return [
        `${name}=${value}`,
        "Path=/",
        "HttpOnly",
        "SameSite=Lax",
        ...(secure ? ["Secure"] : []),
        ...(maxAgeSeconds === undefined ? [] : [`Max-Age=${maxAgeSeconds}`]),
      ].join("; ");
    },
  };
}

/** The value of cookie `name` in the request, or undefined (the first one when repeated). */
export function readCookie(request: Request, name: string): string | undefined {
  const header = request.headers.get("cookie");
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const at = part.indexOf("=");
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return undefined;
}
