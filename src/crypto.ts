/** Random tokens and hashes; the only place that decides how secrets are encoded. */

import { createHash } from "node:crypto";

const encoder = new TextEncoder();

/**
 * A random base64url string from `bytes` random bytes (32 bytes → 43 characters, 256 bits).
 *
 * @see spec §8 (flow state size parameter 32)
 */
export function randomToken(bytes = 32): string {
  return crypto.getRandomValues(new Uint8Array(bytes)).toBase64({
    alphabet: "base64url",
    omitPadding: true,
  });
}

/**
 * SHA-256 of a UTF-8 string as base64url: how secrets appear in storage keys. Synchronous
 * (node:crypto) because every grant hashes several tokens, and each `crypto.subtle` call is a
 * round trip through a thread pool that costs more than the hash.
 */
export function sha256Base64Url(text: string): string {
  return createHash("sha256").update(text).digest("base64url");
}

/** Compares two strings in time independent of where they differ. */
export function timingSafeEqual(a: string, b: string): boolean {
  const x = encoder.encode(a);
  const y = encoder.encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  }
  return diff === 0;
}
