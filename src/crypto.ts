/** Random tokens and hashes; the only place that decides how secrets are encoded. */

import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";

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

/*
 * Hashes and MACs on the request path are computed in JavaScript (@noble/hashes), in place:
 * every grant hashes several tokens and signs one, and each `crypto.subtle` call is a round
 * trip through Deno's blocking thread pool that costs more than the hash itself. node:crypto
 * also runs in place, but each of its hash objects holds native memory until the garbage
 * collector finalises it, which added 10–15 MiB to the service's peak RSS under load.
 */

/** SHA-256 of a UTF-8 string as base64url: how secrets appear in storage keys. */
export function sha256Base64Url(text: string): string {
  return base64Url(sha256(encoder.encode(text)));
}

/** SHA-256 of a UTF-8 string as lowercase hex (a digest an operator compares by eye). */
export function sha256Hex(text: string): string {
  return sha256(encoder.encode(text)).toHex();
}

/**
 * HMAC-SHA256 under `key`, as base64url, for many messages: the key's padded blocks are hashed
 * once, and each message continues from a copy of that state.
 */
export function hmacSha256Base64Url(key: Uint8Array): (text: string) => string {
  const keyed = hmac.create(sha256, key);
  return (text) => base64Url(keyed.clone().update(encoder.encode(text)).digest());
}

function base64Url(bytes: Uint8Array): string {
  return bytes.toBase64({ alphabet: "base64url", omitPadding: true });
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
