/**
 * Access tokens: HS256 JWTs. Signed with the current secret; verified against it and any
 * retired one (JWT_SECRET_PREVIOUS), so a rotation does not log everyone out.
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
  /** The MCP server the token is for (RFC 8707); absent in tokens from before. */
  resource?: string;
}

/** Signs and verifies access tokens with times from the caller, not the wall clock. */
export interface TokenSigner {
  sign(claims: AccessTokenClaims, nowMs: number, ttlSeconds: number): Promise<string>;
  /**
   * Verifies signature (HS256 only, any of our secrets), issuer and expiry, with
   * `clockToleranceSeconds` of leeway; throws jose's errors on any failure.
   */
  verify(
    token: string,
    issuer: string,
    nowMs: number,
    clockToleranceSeconds?: number,
  ): Promise<AccessTokenClaims>;
  /**
   * The claims of a token we signed, checking only the signature and algorithm (revocation
   * accepts expired tokens and any issuer spelling); null when it is not ours.
   */
  readSigned(token: string): Promise<Partial<AccessTokenClaims & { exp: number }> | null>;
}

const ALGORITHM = "HS256";

/**
 * A signer over `secrets`: the first signs, every one verifies. Keys are imported once, on
 * first use (a pre-imported CryptoKey signs markedly faster than raw bytes).
 */
export function createTokenSigner(secrets: readonly string[]): TokenSigner {
  if (secrets.length === 0) throw new TypeError("createTokenSigner needs a secret");
  let imported: Promise<CryptoKey[]> | undefined;
  const keys = () => imported ??= Promise.all(secrets.map(importHmacKey));

  /** Tries each key; only a signature mismatch means "maybe another secret". */
  async function withEachKey<T>(attempt: (key: CryptoKey) => Promise<T>): Promise<T> {
    let failure: unknown = new errors.JWSSignatureVerificationFailed();
    for (const key of await keys()) {
      try {
        return await attempt(key);
      } catch (error) {
        if (!(error instanceof errors.JWSSignatureVerificationFailed)) throw error;
        failure = error;
      }
    }
    throw failure;
  }

  return {
    async sign(claims, nowMs, ttlSeconds) {
      const iat = Math.floor(nowMs / 1000);
      const { iss, sub, aud, ...rest } = claims;
      return await new SignJWT({ ...rest })
        .setProtectedHeader({ alg: ALGORITHM, typ: "JWT" })
        .setIssuer(iss)
        .setSubject(sub)
        .setAudience(aud)
        .setIssuedAt(iat)
        .setExpirationTime(iat + ttlSeconds)
        .sign((await keys())[0]);
    },
    verify(token, issuer, nowMs, clockToleranceSeconds = 0) {
      return withEachKey(async (key) => {
        const { payload } = await jwtVerify(token, key, {
          algorithms: [ALGORITHM],
          issuer,
          currentDate: new Date(nowMs),
          clockTolerance: clockToleranceSeconds,
          requiredClaims: ["exp"],
        });
        return payload as unknown as AccessTokenClaims;
      });
    },
    async readSigned(token) {
      try {
        const payload = await withEachKey(async (key) =>
          (await compactVerify(token, key, { algorithms: [ALGORITHM] })).payload
        );
        const claims: unknown = JSON.parse(new TextDecoder().decode(payload));
        return typeof claims === "object" && claims !== null ? claims : null;
      } catch {
        return null;
      }
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
