/** Reading bearer tokens from requests (RFC 6750 §2.1). */

/**
 * The token of `Authorization: Bearer <token>` (the scheme in any case, after spaces or tabs);
 * undefined when no bearer token was sent.
 */
export function bearerToken(header: string | null | undefined): string | undefined {
  if (header === null || header === undefined) return undefined;
  // The form every client sends, read without running a regular expression over the token.
  if (header.startsWith("Bearer ") && header[7] !== " " && header[7] !== "\t") {
    return header.slice(7).trim();
  }
  const match = header.match(/^Bearer(?:[ \t]+(.*))?$/i);
  return match ? (match[1] ?? "").trim() : undefined;
}

/**
 * Longer than any access token this service signs: a longer one is nobody's, and is refused
 * before it is verified or sent to `/introspect`.
 */
export const MAX_ACCESS_TOKEN_LENGTH = 8192;

/**
 * What a bearer token may be made of (RFC 6750 §2.1's b64token). Ours are JWTs, which always
 * are; checked before a token is verified, since jose's decoder drops whitespace: without the
 * check one token with spaces put anywhere in it verifies as many different strings (each a new
 * cache entry, each a new introspection).
 */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

/** Whether `token` has the syntax of a bearer token. */
export function isBearerTokenSyntax(token: string): boolean {
  return B64TOKEN.test(token);
}
