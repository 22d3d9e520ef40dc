/**
 * Remembered consents of the redirect sign-in, signed: one value per browser, client and return
 * address, verifiable with any of the service's secrets. Kept apart from the cookies that carry
 * them (`sign_in/cookies.ts`) so the app's dependencies can hold a signer without reaching into
 * the sign-in's routes.
 *
 * @see MCP security best practices (per-client consent), RFC 8252 §7.3
 */

import { hkdfSync } from "node:crypto";
import { LOOPBACK_HOSTS } from "../clients/registration.ts";
import { hmacSha256Base64Url, timingSafeEqual } from "../crypto.ts";

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
    hmacSha256Base64Url(new Uint8Array(hkdfSync("sha256", secret, HKDF_SALT, HKDF_INFO, 32)))
  );
  const mac = (
    key: (text: string) => string,
    clientId: string,
    redirectUri: string,
    expiresAt: string,
  ) => key(JSON.stringify(["consent", clientId, consentTarget(redirectUri), expiresAt]));
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
