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

import { createHmac, hkdfSync } from "node:crypto";
import { LOOPBACK_HOSTS } from "../clients.ts";
import { sha256Base64Url, timingSafeEqual } from "../crypto.ts";

/** How long a consent is remembered: 30 days. */
export const CONSENT_MAX_AGE_SECONDS = 30 * 86_400;

const HKDF_SALT = "gitlab-mcp-auth cookies";
const HKDF_INFO = "consent cookie v1";

/** Signs and checks remembered consents; the first secret signs, every one verifies. */
export interface ConsentSigner {
  /** The cookie value remembering that this browser let `clientId` return to `redirectUri`. */
  sign(clientId: string, redirectUri: string, expiresAtMs: number): string;
  /** Whether `value` is an unexpired consent for this client and return address. */
  verify(value: string, clientId: string, redirectUri: string, nowMs: number): boolean;
}

/** A signer whose HMAC keys are derived (HKDF-SHA256) from `secrets`. */
export function createConsentSigner(secrets: readonly string[]): ConsentSigner {
  if (secrets.length === 0) throw new Error("createConsentSigner needs at least one secret");
  const keys = secrets.map((secret) =>
    new Uint8Array(hkdfSync("sha256", secret, HKDF_SALT, HKDF_INFO, 32))
  );
  const mac = (key: Uint8Array, clientId: string, redirectUri: string, expiresAt: string) =>
    createHmac("sha256", key)
      .update(JSON.stringify(["consent", clientId, consentTarget(redirectUri), expiresAt]))
      .digest("base64url");
  return {
    sign(clientId, redirectUri, expiresAtMs) {
      const expiresAt = String(Math.floor(expiresAtMs / 1000));
      return `${expiresAt}.${mac(keys[0], clientId, redirectUri, expiresAt)}`;
    },
    verify(value, clientId, redirectUri, nowMs) {
      const [expiresAt, signature, extra] = value.split(".");
      if (extra !== undefined || !/^\d{1,12}$/.test(expiresAt ?? "") || !signature) return false;
      if (Number(expiresAt) * 1000 < nowMs) return false;
      return keys.some((key) =>
        timingSafeEqual(mac(key, clientId, redirectUri, expiresAt), signature)
      );
    },
  };
}

/**
 * What a consent is remembered for besides the client: the return address, with a loopback
 * port left out (RFC 8252 §7.3: native apps pick a free port on every sign-in).
 */
export function consentTarget(redirectUri: string): string {
  if (!URL.canParse(redirectUri)) return redirectUri;
  const url = new URL(redirectUri);
  if (url.protocol === "http:" && LOOPBACK_HOSTS.includes(url.hostname)) {
    url.port = "";
    return url.href;
  }
  return redirectUri;
}

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
