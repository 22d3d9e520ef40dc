/**
 * The private JWKs that sign access tokens under ACCESS_TOKEN_ALG=ES256 or EdDSA: read from
 * SIGNING_KEYS (or the file SIGNING_KEYS_FILE), checked whole at start-up, and their public
 * halves as the JWKS publishes them.
 *
 * @see RFC 7517 (JWK), RFC 7518 §6.2 (EC keys), RFC 8037 (OKP keys)
 */

import { createPrivateKey, createPublicKey } from "node:crypto";
import { ConfigError } from "../config/variable.ts";
import { unreadableReason } from "../config/unreadable.ts";
import { readSecretFile } from "../config/bounded_read.ts";

/** The asymmetric algorithms access tokens may be signed with. */
export type AsymmetricAlgorithm = "ES256" | "EdDSA";

/** ACCESS_TOKEN_ALG: HS256 (the spec) or one of the asymmetric ones. */
export type AccessTokenAlgorithm = "HS256" | AsymmetricAlgorithm;

/** A private signing key as configured (a JWK with `d`), with the `kid` every token names. */
export interface PrivateSigningJwk {
  kid: string;
  kty: "EC" | "OKP";
  crv: "P-256" | "Ed25519";
  x: string;
  y?: string;
  d: string;
}

/** A public key as `/.well-known/jwks.json` publishes it: never `d`. */
export interface PublicSigningJwk {
  kid: string;
  kty: "EC" | "OKP";
  crv: "P-256" | "Ed25519";
  x: string;
  y?: string;
  alg: AsymmetricAlgorithm;
  use: "sig";
}

/** The key type and curve each algorithm signs with. */
const KEY_TYPES: Record<AsymmetricAlgorithm, { kty: "EC" | "OKP"; crv: "P-256" | "Ed25519" }> = {
  ES256: { kty: "EC", crv: "P-256" },
  EdDSA: { kty: "OKP", crv: "Ed25519" },
};

/** The algorithm a (checked) key signs with. */
export function algorithmOfKey(jwk: Pick<PrivateSigningJwk, "crv">): AsymmetricAlgorithm {
  return jwk.crv === "P-256" ? "ES256" : "EdDSA";
}

/** The public half of a private key, as published. */
export function publicJwkOf(jwk: PrivateSigningJwk): PublicSigningJwk {
  return {
    kid: jwk.kid,
    kty: jwk.kty,
    crv: jwk.crv,
    x: jwk.x,
    ...(jwk.y === undefined ? {} : { y: jwk.y }),
    alg: algorithmOfKey(jwk),
    use: "sig",
  };
}

/**
 * SIGNING_KEYS: a non-empty JSON array of private ES256 or EdDSA JWKs, each with its own `kid`.
 * Throws a one-line ConfigError naming the variable and the key at fault; never echoes `d`.
 */
export function parseSigningKeys(name: string, raw: string): PrivateSigningJwk[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError(name, "must be a JSON array of private JWKs (it is not JSON)");
  }
  if (!Array.isArray(parsed) || parsed.length === 0) {
    throw new ConfigError(name, "must be a non-empty JSON array of private JWKs");
  }
  const keys = parsed.map((entry, index) => checkedKey(name, entry, index));
  const kids = new Set<string>();
  for (const { kid } of keys) {
    if (kids.has(kid)) throw new ConfigError(name, `two keys have the kid ${JSON.stringify(kid)}`);
    kids.add(kid);
  }
  return keys;
}

/** SIGNING_KEYS_FILE: a file holding what SIGNING_KEYS would. */
export function parseSigningKeysFile(name: string, path: string): PrivateSigningJwk[] {
  let text: string;
  try {
    text = readSecretFile(path);
  } catch (error) {
    throw new ConfigError(name, `cannot read ${JSON.stringify(path)} (${unreadableReason(error)})`);
  }
  return parseSigningKeys(name, text);
}

function checkedKey(name: string, entry: unknown, index: number): PrivateSigningJwk {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
    throw new ConfigError(name, `key ${index + 1} is not a JWK object`);
  }
  const jwk = entry as Record<string, unknown>;
  const label = typeof jwk.kid === "string" && jwk.kid !== ""
    ? `key ${JSON.stringify(jwk.kid)}`
    : `key ${index + 1}`;
  if (typeof jwk.kid !== "string" || jwk.kid === "" || jwk.kid.length > 200) {
    throw new ConfigError(name, `${label} has no kid (a short string naming it)`);
  }
  const type = Object.values(KEY_TYPES).find(({ kty, crv }) => jwk.kty === kty && jwk.crv === crv);
  if (!type) {
    throw new ConfigError(
      name,
      `${label} must be an EC P-256 (ES256) or OKP Ed25519 (EdDSA) key, got kty ${
        JSON.stringify(jwk.kty)
      } crv ${JSON.stringify(jwk.crv)}`,
    );
  }
  if (jwk.d === undefined) {
    throw new ConfigError(name, `${label} is a public key; a signing key needs its private "d"`);
  }
  requireMarkedForSigning(name, label, jwk, algorithmOfKey(type));
  const members = type.kty === "EC" ? ["x", "y", "d"] : ["x", "d"];
  for (const member of members) {
    if (typeof jwk[member] !== "string") {
      throw new ConfigError(name, `${label} lacks its "${member}"`);
    }
  }
  const key: PrivateSigningJwk = {
    kid: jwk.kid,
    ...type,
    x: jwk.x as string,
    ...(type.kty === "EC" ? { y: jwk.y as string } : {}),
    d: jwk.d as string,
  };
  requireConsistent(name, label, key);
  return key;
}

/**
 * The names RFC 9864 gives the same signatures, fully specified: a key marked with one is meant
 * for what the service signs with it.
 */
const SAME_SIGNATURE: Record<AsymmetricAlgorithm, string[]> = { ES256: [], EdDSA: ["Ed25519"] };

/**
 * The members that say what a key is for (RFC 7517 §4.2–4.4), when present, must allow what the
 * service does with it: sign tokens with `algorithm`. A key marked for encryption, for other
 * operations or for another algorithm must not sign (and its holder meant it for something else).
 */
function requireMarkedForSigning(
  name: string,
  label: string,
  jwk: Record<string, unknown>,
  algorithm: AsymmetricAlgorithm,
): void {
  if (jwk.use !== undefined && jwk.use !== "sig") {
    throw new ConfigError(
      name,
      `${label} has "use" ${quoted(jwk.use)}; a signing key has "use": "sig" or no "use"`,
    );
  }
  const ops = jwk.key_ops;
  const operations = Array.isArray(ops) && ops.every((op) => typeof op === "string");
  if (ops !== undefined && (!operations || !ops.includes("sign"))) {
    throw new ConfigError(
      name,
      `${label} has "key_ops" ${quoted(ops)} without "sign"; a signing key lists "sign" or has ` +
        'no "key_ops"',
    );
  }
  const alg = jwk.alg;
  if (
    alg !== undefined && alg !== algorithm && !SAME_SIGNATURE[algorithm].includes(alg as string)
  ) {
    throw new ConfigError(
      name,
      `${label} has "alg" ${quoted(alg)}, but an ${algorithm} key signs ${algorithm} ` +
        `(ACCESS_TOKEN_ALG); remove "alg" or set it to "${algorithm}"`,
    );
  }
}

/** A member's value for a one-line error: JSON, cut short (it is the operator's, never "d"). */
function quoted(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

/** The private part must be a valid key whose public half is the `x` (and `y`) given. */
function requireConsistent(name: string, label: string, key: PrivateSigningJwk): void {
  let derived: JsonWebKey;
  try {
    const { kid: _kid, ...material } = key;
    derived = createPublicKey(createPrivateKey({ key: material, format: "jwk" })).export({
      format: "jwk",
    });
  } catch {
    throw new ConfigError(name, `${label} is not a valid ${key.crv} private key`);
  }
  if (derived.x !== key.x || (key.y !== undefined && derived.y !== key.y)) {
    throw new ConfigError(name, `${label}: its public part does not match its private "d"`);
  }
}

/** A new private key for `algorithm`, with a fresh random `kid` (`admin keys generate`). */
export async function generateSigningKey(
  algorithm: AsymmetricAlgorithm,
  now: Date,
): Promise<PrivateSigningJwk> {
  const params = algorithm === "ES256"
    ? { name: "ECDSA", namedCurve: "P-256" }
    : { name: "Ed25519" };
  const pair = await crypto.subtle.generateKey(params, true, ["sign", "verify"]) as CryptoKeyPair;
  const jwk = await crypto.subtle.exportKey("jwk", pair.privateKey);
  const random = crypto.getRandomValues(new Uint8Array(6)).toHex();
  return {
    kid: `${now.toISOString().slice(0, 10)}-${random}`,
    ...KEY_TYPES[algorithm],
    x: jwk.x ?? "",
    ...(jwk.y === undefined ? {} : { y: jwk.y }),
    d: jwk.d ?? "",
  };
}
