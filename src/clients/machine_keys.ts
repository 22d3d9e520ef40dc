/**
 * The public keys an operator registers for a `private_key_jwt` client (`admin clients add
 * --jwks-file`): a JWK Set (or one JWK) of keys the accepted algorithms can verify with. Only
 * the public members are kept; a file holding a private key is refused, so that the operator
 * learns the private half left the client.
 */

import { importJWK, type JWK } from "jose";

/** Keys one client may register. */
const MAX_KEYS = 10;
/**
 * The public members kept of each key. `alg` is checked, not kept: each kind of key verifies one
 * accepted algorithm, and an Ed25519 key signs under two names (EdDSA, Ed25519).
 */
const PUBLIC_MEMBERS = ["kty", "crv", "x", "y", "n", "e", "kid", "use"] as const;
/** Members only a private (or symmetric) key has. */
const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/** A key file that cannot be registered; the message says why. */
export class MachineKeyError extends Error {
  override name = "MachineKeyError";
}

/** The algorithm each kind of key verifies, as `admin clients add` accepts it. */
function algorithmOf(key: JWK): "ES256" | "RS256" | "EdDSA" {
  if (key.kty === "EC" && key.crv === "P-256") return "ES256";
  if (key.kty === "RSA") return "RS256";
  if (key.kty === "OKP" && key.crv === "Ed25519") return "EdDSA";
  throw new MachineKeyError(
    `key ${describe(key)}: only EC P-256 (ES256), RSA (RS256) and OKP Ed25519 (EdDSA) keys`,
  );
}

/** The public JWK Set of a key file's text; throws MachineKeyError for anything else. */
export async function publicJwksOf(text: string): Promise<{ keys: JsonWebKey[] }> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new MachineKeyError("the key file is not JSON (a JWK Set or one JWK)");
  }
  const keys = isObject(parsed) && Array.isArray(parsed.keys) ? parsed.keys : [parsed];
  if (keys.length === 0 || keys.length > MAX_KEYS) {
    throw new MachineKeyError(`the key file must hold 1 to ${MAX_KEYS} keys`);
  }
  return { keys: await Promise.all(keys.map(publicKeyOf)) };
}

async function publicKeyOf(candidate: unknown): Promise<JsonWebKey> {
  if (!isObject(candidate) || typeof candidate.kty !== "string") {
    throw new MachineKeyError("every key must be a JWK object with kty");
  }
  const key = candidate as JWK;
  if (PRIVATE_MEMBERS.some((member) => member in candidate)) {
    throw new MachineKeyError(
      `key ${describe(key)} is private (or symmetric): register the public key only`,
    );
  }
  const alg = algorithmOf(key);
  if (key.alg !== undefined && key.alg !== alg && !(alg === "EdDSA" && key.alg === "Ed25519")) {
    throw new MachineKeyError(`key ${describe(key)}: alg ${key.alg} does not fit the key`);
  }
  if (key.use !== undefined && key.use !== "sig") {
    throw new MachineKeyError(`key ${describe(key)}: use must be sig`);
  }
  const kept = Object.fromEntries(
    PUBLIC_MEMBERS.filter((member) => key[member] !== undefined).map((m) => [m, key[m]]),
  ) as JWK;
  try {
    await importJWK(kept, alg);
  } catch (error) {
    throw new MachineKeyError(`key ${describe(key)} cannot be used: ${messageOf(error)}`);
  }
  // The runtime's import takes a curve point of the wrong size; the first verification would not.
  const pointMembers = alg === "ES256" ? [kept.x, kept.y] : alg === "EdDSA" ? [kept.x] : [];
  if (pointMembers.some((member) => decodedLength(member) !== 32)) {
    throw new MachineKeyError(`key ${describe(key)} cannot be used: its point is not 32 bytes`);
  }
  if (alg === "RS256" && decodedLength(kept.n) * 8 < 2048) {
    throw new MachineKeyError(`key ${describe(key)}: RSA keys must have at least 2048 bits`);
  }
  return kept as JsonWebKey;
}

/** Bytes of a base64url member (0 when absent or not base64url). */
function decodedLength(member: string | undefined): number {
  try {
    return Uint8Array.fromBase64(member ?? "", { alphabet: "base64url" }).length;
  } catch {
    return 0;
  }
}

function describe(key: JWK): string {
  return key.kid === undefined ? `(${key.kty})` : JSON.stringify(String(key.kid).slice(0, 64));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
