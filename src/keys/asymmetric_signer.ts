/**
 * Access tokens signed with a private key (ACCESS_TOKEN_ALG=ES256 or EdDSA), so a resource
 * server verifies them with the published public keys and cannot mint any. The first key
 * signs and names itself in the header's `kid`; every key verifies, so a token of a key that
 * moved second still verifies until the key is removed.
 *
 * @see RFC 7515 §4.1.4 (kid), RFC 7517 (JWKS), RFC 9068 §2.1 (typ), §2.2 (jti, client_id)
 */

import { createPrivateKey, sign as nodeSign } from "node:crypto";
import { compactVerify, errors, importJWK, type JWTHeaderParameters, SignJWT } from "jose";
import { randomToken } from "../crypto.ts";
import { type TokenSigner, verifyAccessToken } from "../jwt.ts";
import { type AsymmetricAlgorithm, type PrivateSigningJwk, publicJwkOf } from "./signing_keys.ts";

/**
 * RFC 9068 §2.1: a JWT access token says so in `typ`, and a validator of that profile refuses
 * one that does not. Not checked when verifying: these keys sign nothing else, and tokens
 * signed before said `JWT`.
 */
const ACCESS_TOKEN_TYPE = "at+jwt";

/** A signer over `keys` (checked, all of `algorithm`): the first signs, each verifies. */
export function createAsymmetricTokenSigner(
  keys: readonly PrivateSigningJwk[],
  algorithm: AsymmetricAlgorithm,
): TokenSigner {
  if (keys.length === 0) throw new TypeError("createAsymmetricTokenSigner needs a key");
  const signing = keys[0];
  let privateKey: Promise<CryptoKey> | undefined;
  const signingKey = () =>
    privateKey ??= importJWK({ ...signing, alg: algorithm }, algorithm) as Promise<CryptoKey>;
  const publicKeys = new Map<string, Promise<CryptoKey>>();

  /** The public key a token's header names; an unknown or absent `kid` matches none. */
  function keyFor(header: JWTHeaderParameters): Promise<CryptoKey> {
    const kid = header.kid;
    const jwk = keys.find((key) => key.kid === kid);
    if (kid === undefined || !jwk) return Promise.reject(new errors.JWKSNoMatchingKey());
    let key = publicKeys.get(kid);
    if (!key) {
      key = importJWK(publicJwkOf(jwk), algorithm) as Promise<CryptoKey>;
      publicKeys.set(kid, key);
    }
    return key;
  }

  const signEd25519 = algorithm === "EdDSA" ? ed25519Signer(signing) : undefined;

  return {
    publicKeys: keys.map(publicJwkOf),
    async sign(claims, nowMs, ttlSeconds) {
      const iat = Math.floor(nowMs / 1000);
      if (signEd25519) {
        return signEd25519({ ...claims, jti: randomToken(16), iat, exp: iat + ttlSeconds });
      }
      return await new SignJWT({ ...claims, jti: randomToken(16) })
        .setProtectedHeader({ alg: algorithm, typ: ACCESS_TOKEN_TYPE, kid: signing.kid })
        .setIssuedAt(iat)
        .setExpirationTime(iat + ttlSeconds)
        .sign(await signingKey());
    },
    async verify(token, issuer, nowMs, clockToleranceSeconds = 0) {
      return await verifyAccessToken(
        token,
        keyFor,
        algorithm,
        issuer,
        nowMs,
        clockToleranceSeconds,
      );
    },
    async readSigned(token) {
      try {
        const { payload } = await compactVerify(token, keyFor, { algorithms: [algorithm] });
        const claims: unknown = JSON.parse(new TextDecoder().decode(payload));
        return typeof claims === "object" && claims !== null ? claims : null;
      } catch {
        return null;
      }
    },
  };
}

/**
 * EdDSA signing in place: `node:crypto` signs Ed25519 synchronously, where a `crypto.subtle`
 * call is a round trip through a thread pool costing more than the signature itself (issue 39:
 * `deno task bench-signatures`). ES256 stays on WebCrypto, the fastest P-256 signer Deno has.
 */
function ed25519Signer(jwk: PrivateSigningJwk): (claims: Record<string, unknown>) => string {
  const key = createPrivateKey({
    key: { kty: "OKP", crv: "Ed25519", x: jwk.x, d: jwk.d },
    format: "jwk",
  });
  const header = base64Url(JSON.stringify({ alg: "EdDSA", typ: ACCESS_TOKEN_TYPE, kid: jwk.kid }));
  return (claims) => {
    const signingInput = `${header}.${base64Url(JSON.stringify(claims))}`;
    const signature = nodeSign(null, new TextEncoder().encode(signingInput), key);
    return `${signingInput}.${base64Url(signature)}`;
  };
}

function base64Url(data: string | Uint8Array): string {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  return bytes.toBase64({ alphabet: "base64url", omitPadding: true });
}
