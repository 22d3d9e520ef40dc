/**
 * Remembered consents of the redirect sign-in, signed: one value per browser, client and return
 * address, bound to the GitLab scopes and the protected resource consented to, verifiable with any of the service's secrets. Kept apart from the cookies that carry
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

/**
 * What a browser consented to: the client and return address, and what the consent page showed
 * it would get (the GitLab scopes) and for which protected resource. A consent remembered for
 * `read_api` does not cover `api sudo`.
 */
export interface ConsentGrant {
  clientId: string;
  redirectUri: string;
  /** The GitLab scopes the consent page named. */
  scopes: string;
  /** The protected resource the tokens are bound to; empty when the request named none. */
  resource: string;
}

/** Signs and checks remembered consents; the first secret signs, every one verifies. */
export interface ConsentSigner {
  /** The cookie value remembering that this browser consented to `grant`. */
  sign(grant: ConsentGrant, expiresAtMs: number): string;
  /** Whether `value` is an unexpired consent to exactly this grant. */
  verify(value: string, grant: ConsentGrant, nowMs: number): boolean;
}

/** A signer whose HMAC keys are derived (HKDF-SHA256) from `secrets`. */
export function createConsentSigner(secrets: readonly string[]): ConsentSigner {
  if (secrets.length === 0) throw new Error("createConsentSigner needs at least one secret");
  const keys = secrets.map((secret) =>
    hmacSha256Base64Url(new Uint8Array(hkdfSync("sha256", secret, HKDF_SALT, HKDF_INFO, 32)))
  );
  const mac = (key: (text: string) => string, grant: ConsentGrant, expiresAt: string) =>
    key(JSON.stringify([
      "consent",
      grant.clientId,
      consentTarget(grant.redirectUri),
      normalizedScopes(grant.scopes),
      grant.resource,
      expiresAt,
    ]));
  return {
    sign(grant, expiresAtMs) {
      const expiresAt = String(Math.floor(expiresAtMs / 1000));
      return `${expiresAt}.${mac(keys[0], grant, expiresAt)}`;
    },
    verify(value, grant, nowMs) {
      const [expiresAt, signature, extra] = value.split(".");
      if (extra !== undefined || !/^\d{1,12}$/.test(expiresAt ?? "") || !signature) return false;
      if (Number(expiresAt) * 1000 < nowMs) return false;
      return keys.some((key) => timingSafeEqual(mac(key, grant, expiresAt), signature));
    },
  };
}

/** The same scopes in any order and spacing are the same consent. */
function normalizedScopes(scopes: string): string {
  return [...new Set(scopes.split(/\s+/).filter(Boolean))].sort().join(" ");
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
