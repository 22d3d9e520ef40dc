/**
 * Authorization codes and refresh tokens: 32 random bytes, followed by the id of the session
 * they belong to, so the store finds the session without an index: a refresh token's session
 * keeps its hash, and a code comes back with its session in one round trip. The id is no secret
 * (access tokens carry it as `sid`); the random part is what makes a code or token
 * unguessable, and only its SHA-256 hash is stored.
 */

import { randomToken, sha256Base64Url } from "../crypto.ts";

const SEPARATOR = ".";
const SESSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A new authorization code or refresh token for a session. */
export function newSessionToken(sessionId: string): string {
  return `${randomToken(32)}${SEPARATOR}${sessionId}`;
}

/** The session id a code or refresh token names, or undefined for one not of this shape. */
export function sessionIdOf(token: string): string | undefined {
  const id = token.slice(token.lastIndexOf(SEPARATOR) + 1);
  return token.includes(SEPARATOR) && SESSION_ID.test(id) ? id : undefined;
}

/** What a session keeps of its refresh token. */
export function refreshTokenHash(token: string): string {
  return sha256Base64Url(token);
}
