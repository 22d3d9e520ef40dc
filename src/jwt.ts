/**
 * Access tokens: HS256 JWTs signed with a key imported once.
 *
 * @see spec §2.6, RFC 7519
 */

import { compactVerify, errors, jwtVerify, SignJWT } from "jose";

/** The claims of an access token beyond `iat` and `exp`. */
export interface AccessTokenClaims {
  iss: string;
  sub: string;
  aud: string;
  sid: string;
  scope: string;
  gitlab_user: string;
}

/** Signs and verifies access tokens with times from the caller, not the wall clock. */
export interface TokenSigner {
  sign(claims: AccessTokenClaims, nowMs: number, ttlSeconds: number): Promise<string>;
  /** Verifies signature, algorithm and issuer; throws on any failure. */
  verify(token: string, issuer: string, nowMs: number): Promise<AccessTokenClaims>;
  /**
   * The claims of a token we signed, checking only the signature and algorithm (revocation
   * accepts expired tokens and any issuer spelling); null when it is not ours.
   */
  readSigned(token: string): Promise<Partial<AccessTokenClaims> | null>;
}

const ALGORITHM = "HS256";

/** Imports the secret once (a pre-imported CryptoKey signs markedly faster than raw bytes). */
export async function createTokenSigner(secret: string): Promise<TokenSigner> {
  const key = await importHmacKey(secret);
  return {
    sign(claims, nowMs, ttlSeconds) {
      const iat = Math.floor(nowMs / 1000);
      const { iss, sub, aud, ...rest } = claims;
      return new SignJWT({ ...rest })
        .setProtectedHeader({ alg: ALGORITHM, typ: "JWT" })
        .setIssuer(iss)
        .setSubject(sub)
        .setAudience(aud)
        .setIssuedAt(iat)
        .setExpirationTime(iat + ttlSeconds)
        .sign(key);
    },
    async verify(token, issuer, nowMs) {
      const { payload } = await jwtVerify(token, key, {
        algorithms: [ALGORITHM],
        issuer,
        currentDate: new Date(nowMs),
      });
      return payload as unknown as AccessTokenClaims;
    },
    async readSigned(token) {
      try {
        const { payload } = await compactVerify(token, key, { algorithms: [ALGORITHM] });
        const claims: unknown = JSON.parse(new TextDecoder().decode(payload));
        return typeof claims === "object" && claims !== null ? claims : null;
      } catch {
        return null;
      }
    },
  };
}

/** Verifies access tokens signed with the current secret or a retired one. */
export interface TokenVerifier {
  /** Verifies signature (HS256 only), issuer and expiry within the tolerance; throws jose errors. */
  verify(token: string, issuer: string, nowMs: number): Promise<AccessTokenClaims>;
}

/**
 * A verifier accepting tokens signed with any of `secrets` (current first, then retired ones),
 * with `clockToleranceSeconds` of leeway on `exp` and `nbf`. Keys are imported on first use.
 */
export function createTokenVerifier(
  secrets: readonly string[],
  clockToleranceSeconds: number,
): TokenVerifier {
  let keys: Promise<CryptoKey[]> | undefined;
  return {
    async verify(token, issuer, nowMs) {
      keys ??= Promise.all(secrets.map(importHmacKey));
      let failure: unknown = new errors.JWSSignatureVerificationFailed();
      for (const key of await keys) {
        try {
          const { payload } = await jwtVerify(token, key, {
            algorithms: [ALGORITHM],
            issuer,
            currentDate: new Date(nowMs),
            clockTolerance: clockToleranceSeconds,
            requiredClaims: ["exp"],
          });
          return payload as unknown as AccessTokenClaims;
        } catch (error) {
          // Only a signature mismatch means "maybe the other secret"; anything else is final.
          if (!(error instanceof errors.JWSSignatureVerificationFailed)) throw error;
          failure = error;
        }
      }
      throw failure;
    },
  };
}

function importHmacKey(secret: string): Promise<CryptoKey> {
  return crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}
