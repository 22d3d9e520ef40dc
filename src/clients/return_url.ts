/**
 * The address that brings the browser back to the client (RFC 6749 §4.1.2 and §4.1.2.1): its
 * `redirect_uri` with `params` (a code, or an error), then `state` when the request had one,
 * then `iss` (RFC 9207). Only for a redirect URI `/authorize` validated and stored.
 */

import { UNSAFE_REDIRECT_SCHEMES } from "./uri_schemes.ts";

/** The return address; `issuer` is left out when not given. */
export function clientReturnUrl(
  redirectUri: string,
  params: Record<string, string>,
  state: string,
  issuer?: string,
): URL {
  const location = new URL(redirectUri);
  for (const [name, value] of Object.entries(params)) location.searchParams.set(name, value);
  if (state) location.searchParams.set("state", state);
  if (issuer) location.searchParams.set("iss", issuer);
  return location;
}

/** An absolute URI a browser may be sent to (not `javascript:` and the like). */
export function isFollowableRedirect(redirectUri: string): boolean {
  return URL.canParse(redirectUri) &&
    !UNSAFE_REDIRECT_SCHEMES.includes(new URL(redirectUri).protocol);
}
