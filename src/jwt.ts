/**
 * Access tokens: HS256 JWTs. Signed with the current secret; verified against it and any
 * retired one (JWT_SECRET_PREVIOUS), so a rotation does not log everyone out.
 *
 * @see spec §2.6, RFC 7519
 */

import { compactVerify, errors, jwtVerify } from "jose";
import { hmacSha256Base64Url } from "./crypto.ts";

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
  /**
   * The OAuth client (RFC 9068 §2.2): in ES256/EdDSA tokens only; an HS256 token carries
   * exactly the spec's claims (§2.6), so its signer leaves this out.
   */
  client_id?: string;
}

/** The kinds of machine caller, as audit lines name them (`"caller"`). */
export type MachineKind = "ci" | "client";

/**
 * How an access token's `sub` names a machine caller: `ci:<project_path>` (a GitLab CI job) or
 * `client:<client_id>` (an operator-registered client); any other `sub` is a person's.
 */
export const SUBJECT_PREFIXES: Readonly<Record<MachineKind, string>> = {
  ci: "ci:",
  client: "client:",
};

/** The machine kind an access token's `sub` names, or undefined for a person's token. */
export function machineKindOf(sub: string): MachineKind | undefined {
  if (sub.startsWith(SUBJECT_PREFIXES.ci)) return "ci";
  if (sub.startsWith(SUBJECT_PREFIXES.client)) return "client";
  return undefined;
}

/** The `sub` of a machine caller's access token. */
export function machineSubject(kind: MachineKind, name: string): string {
  return `${SUBJECT_PREFIXES[kind]}${name}`;
}

/** Signs and verifies access tokens with times from the caller, not the wall clock. */
/** A key jose verifies with: one key, or a function choosing it by the token's header. */
type VerifyingKey = Parameters<typeof jwtVerify>[1];

/**
 * Verifies an access token's signature (`algorithm` only), issuer and expiry (required) with
 * `key`, at `nowMs`; throws jose's errors.
 */
export async function verifyAccessToken(
  token: string,
  key: VerifyingKey,
  algorithm: string,
  issuer: string,
  nowMs: number,
  clockToleranceSeconds: number,
): Promise<AccessTokenClaims> {
  const { payload } = await jwtVerify(token, key, {
    algorithms: [algorithm],
    issuer,
    currentDate: new Date(nowMs),
    clockTolerance: clockToleranceSeconds,
    requiredClaims: ["exp"],
  });
  return payload as unknown as AccessTokenClaims;
}

export interface TokenSigner {
  /** The public keys resource servers verify with (`/.well-known/jwks.json`); none for HS256. */
  readonly publicKeys: readonly JsonWebKey[];
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

/** The protected header of every token we sign, encoded once. */
const SIGNED_HEADER = base64Url(JSON.stringify({ alg: ALGORITHM, typ: "JWT" }));

/**
 * A signer over `secrets`: the first signs, every one verifies. Verification is jose's, with
 * keys imported once, on first use. Signing is a plain HMAC-SHA256 over our own fixed header
 * and claims, computed in place (crypto.ts): a `crypto.subtle` call is a round trip through a
 * thread pool that cost a refresh grant more than everything else it signs.
 */
export function createTokenSigner(secrets: readonly string[]): TokenSigner {
  if (secrets.length === 0) throw new TypeError("createTokenSigner needs a secret");
  const mac = hmacSha256Base64Url(new TextEncoder().encode(secrets[0]));
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
    publicKeys: [],
    sign({ client_id: _notInTheSpec, ...claims }, nowMs, ttlSeconds) {
      const iat = Math.floor(nowMs / 1000);
      const payload = base64Url(JSON.stringify({ ...claims, iat, exp: iat + ttlSeconds }));
      const signingInput = `${SIGNED_HEADER}.${payload}`;
      return Promise.resolve(`${signingInput}.${mac(signingInput)}`);
    },
    verify(token, issuer, nowMs, clockToleranceSeconds = 0) {
      return withEachKey((key) =>
        verifyAccessToken(token, key, ALGORITHM, issuer, nowMs, clockToleranceSeconds)
      );
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

function base64Url(text: string): string {
  return new TextEncoder().encode(text).toBase64({ alphabet: "base64url", omitPadding: true });
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
