/** Signing keys for tests of ES256/EdDSA access tokens, and the environment that uses them. */

import { generateSigningKey, type PrivateSigningJwk } from "../src/keys/signing_keys.ts";

export type Algorithm = "ES256" | "EdDSA";

/** `count` fresh keys of `algorithm`, each with its own kid. */
export async function freshKeys(algorithm: Algorithm, count: number): Promise<PrivateSigningJwk[]> {
  const keys: PrivateSigningJwk[] = [];
  for (let i = 0; i < count; i++) {
    keys.push({ ...await generateSigningKey(algorithm, new Date()), kid: `${algorithm}-${i}` });
  }
  return keys;
}

/** The environment of a service signing with `keys` (the first signs). */
export function signingEnv(
  algorithm: Algorithm,
  keys: readonly PrivateSigningJwk[],
): Record<string, string> {
  return { ACCESS_TOKEN_ALG: algorithm, SIGNING_KEYS: JSON.stringify(keys) };
}
