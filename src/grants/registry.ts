/**
 * The grant types `POST /token` serves, keyed by `grant_type`: adding one is a module in this
 * folder and one line here. Metadata (`grant_types_supported`), dynamic registration and the
 * metrics' grant label read this list.
 */

import { AUTHORIZATION_CODE_GRANT } from "./authorization_code.ts";
import type { Grant } from "./grant.ts";
import { REFRESH_TOKEN_GRANT } from "./refresh_token.ts";

/** Every grant type the service serves, in the order metadata lists them. */
export const GRANTS: readonly Grant[] = [
  AUTHORIZATION_CODE_GRANT,
  REFRESH_TOKEN_GRANT,
];

/** The `grant_type` values served. */
export const GRANT_TYPES: readonly string[] = GRANTS.map((grant) => grant.type);

/** The `grant_type` values a client registering itself may ask for. */
export const REGISTRABLE_GRANT_TYPES: readonly string[] = GRANTS
  .filter((grant) => grant.registrable).map((grant) => grant.type);

/** The grant of `grantType`, or undefined when it is not served. */
export function grantFor(grantType: string | undefined): Grant | undefined {
  return GRANTS.find((grant) => grant.type === grantType);
}
