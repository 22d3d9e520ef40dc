/**
 * The resource servers allowed to call `/introspect`: INTROSPECTION_TOKENS, and the check of
 * a presented bearer credential against them in time that depends on neither the credential
 * nor which configured one it matches.
 *
 * @see RFC 7662 §2.1 ("the endpoint MUST require some form of authorization")
 */

import { ConfigError } from "../config/variable.ts";
import { MIN_SECRET_BYTES } from "../config/parsers.ts";
import { sha256Base64Url, timingSafeEqual } from "../crypto.ts";

/** The comparison every caller check uses: the shared constant-time helper of crypto.ts. */
export const CALLER_TOKEN_EQUALS: (a: string, b: string) => boolean = timingSafeEqual;

/** INTROSPECTION_TOKENS: comma-separated secrets, each at least 32 bytes. */
export function parseIntrospectionTokens(name: string, raw: string): string[] {
  const tokens = raw.split(",").map((token) => token.trim()).filter((token) => token !== "");
  if (tokens.length === 0) throw new ConfigError(name, "lists no token");
  tokens.forEach((token, index) => {
    // A file of one token per line reads as one token no request can ever present.
    if (/[\r\n]/.test(token)) {
      throw new ConfigError(
        name,
        `token ${index + 1} holds a line break, which no Authorization header carries; ` +
          "separate tokens with commas",
      );
    }
    if (new TextEncoder().encode(token).length < MIN_SECRET_BYTES) {
      throw new ConfigError(name, `token ${index + 1} must be at least ${MIN_SECRET_BYTES} bytes`);
    }
  });
  return tokens;
}

/** Which configured caller a credential is; an opaque name fit for a rate-limit key. */
export type CallerCheck = (presented: string) => string | undefined;

/**
 * A check over `tokens`. Digests are compared, so the time spent does not depend on the
 * presented credential's length either, and every configured token is compared, match or not.
 */
export function createCallerCheck(
  tokens: readonly string[],
  equals: (a: string, b: string) => boolean = CALLER_TOKEN_EQUALS,
): CallerCheck {
  const digests = tokens.map(sha256Base64Url);
  return (presented) => {
    const digest = sha256Base64Url(presented);
    let caller: string | undefined;
    for (const known of digests) {
      if (equals(digest, known)) caller ??= known;
    }
    return caller;
  };
}
