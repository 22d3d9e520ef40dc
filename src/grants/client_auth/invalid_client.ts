/** The one refusal of client authentication: 401 `invalid_client` (RFC 6749 §5.2). */

import { OAuthError } from "../../http/errors.ts";

/** The challenge a client that tried (or should try) HTTP Basic gets back. */
const BASIC_CHALLENGE = { "WWW-Authenticate": 'Basic realm="token", charset="UTF-8"' };

/**
 * 401 `invalid_client` naming what failed (never the credential); with `WWW-Authenticate: Basic`
 * when the client used, or may use, the Authorization header.
 */
export function invalidClient(description: string, { basic = false } = {}): OAuthError {
  return new OAuthError(401, "invalid_client", description, basic ? BASIC_CHALLENGE : {});
}
