/**
 * The grant types `POST /token` serves, keyed by `grant_type`: adding one is a module in this
 * folder and one line here. Metadata (`grant_types_supported`), dynamic registration and the
 * metrics' grant label read this list; a grant the configuration switches off
 * (`Grant.enabled`) is unknown to all of them.
 */

import { AUTHORIZATION_CODE_GRANT } from "./authorization_code.ts";
import { CLIENT_CREDENTIALS_GRANT } from "./client_credentials.ts";
import { DEVICE_CODE_GRANT } from "./device_code.ts";
import type { Grant, GrantSwitches } from "./grant.ts";
import { JWT_BEARER_GRANT } from "./jwt_bearer.ts";
import { REFRESH_TOKEN_GRANT } from "./refresh_token.ts";

/** Every grant type the service serves, in the order metadata lists them. */
export const GRANTS: readonly Grant[] = [
  AUTHORIZATION_CODE_GRANT,
  REFRESH_TOKEN_GRANT,
  DEVICE_CODE_GRANT,
  CLIENT_CREDENTIALS_GRANT,
  JWT_BEARER_GRANT,
];

/** Every `grant_type` value the service can serve (some only when configured). */
export const GRANT_TYPES: readonly string[] = GRANTS.map((grant) => grant.type);

/** The grants `config` serves. */
function enabledGrants(config: GrantSwitches): Grant[] {
  return GRANTS.filter((grant) => grant.enabled?.(config) ?? true);
}

/** The `grant_type` values a client registering itself may ask for under `config`. */
export function registrableGrantTypes(config: GrantSwitches): string[] {
  return enabledGrants(config).filter((grant) => grant.registrable).map((grant) => grant.type);
}

/** The `grant_type` values a registration that names none gets. */
export const DEFAULT_GRANT_TYPES: readonly string[] = GRANTS
  .filter((grant) => grant.registrable === true).map((grant) => grant.type);

/** The grants `config` serves by `grant_type`: worked out once, when the service is wired. */
export type ServedGrants = ReadonlyMap<string, Grant>;

/** The grants `config` serves, by `grant_type`. */
export function servedGrants(config: GrantSwitches): ServedGrants {
  return new Map(enabledGrants(config).map((grant) => [grant.type, grant]));
}
