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
