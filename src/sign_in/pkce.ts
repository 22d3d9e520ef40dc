/** PKCE verification. @see RFC 7636 §4.6 */

import { sha256Base64Url, timingSafeEqual } from "../crypto.ts";

/** The only method we accept (spec §1.5). */
export const PKCE_METHOD = "S256";

/** True when `verifier` hashes to `challenge` under `method` (only S256 can match). */
export function verifyPkce(verifier: string, challenge: string, method: string): boolean {
  if (method !== PKCE_METHOD) return false;
  return timingSafeEqual(sha256Base64Url(verifier), challenge);
}
