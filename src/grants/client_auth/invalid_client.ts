/** The one refusal of client authentication: 401 `invalid_client` (RFC 6749 §5.2). */

import { OAuthError } from "../../http/errors.ts";

/**
 * The challenge every 401 carries (RFC 9110 §15.5.2: a 401 names at least one scheme): Basic,
 * which is served wherever a client can fail to authenticate (client_secret_basic is served with
 * every proving method).
 */
const BASIC_CHALLENGE = { "WWW-Authenticate": 'Basic realm="token", charset="UTF-8"' };

/**
 * 401 `invalid_client` naming what failed (never the credential), with `WWW-Authenticate: Basic`
 * whichever method the client tried (RFC 6749 §5.2 asks for it where it tried Basic; HTTP for
 * every 401).
 */
export function invalidClient(description: string): OAuthError {
  return new OAuthError(401, "invalid_client", description, BASIC_CHALLENGE);
}
