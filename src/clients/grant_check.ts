/**
 * Whether a client the service knows may use the grant an endpoint starts: a registration (or a
 * metadata document) must list it, and a machine client (`admin clients add`) has only its
 * client_credentials grant. A client refused here could never use what it would be given (a
 * code it has no grant to redeem, a device code it may not poll for).
 *
 * @see RFC 6749 §4.1.2.1 and §5.2 (`unauthorized_client`), RFC 7591 §2
 */

import { OAuthError } from "../http/errors.ts";
import type { Store } from "../store/mod.ts";

/** 400 `unauthorized_client` unless `grantTypes` (the client's registered ones) list `grantType`. */
export function requireListedGrant(grantTypes: readonly string[], grantType: string): void {
  if (grantTypes.includes(grantType)) return;
  throw new OAuthError(
    400,
    "unauthorized_client",
    `The client's grant_types do not include ${grantType}`,
  );
}

/**
 * 400 `unauthorized_client` when `clientId`, known as no registration, is a machine client's:
 * its one grant is client_credentials, and a user's sign-in must not issue tokens in its name.
 */
export async function refuseMachineClient(
  store: Pick<Store, "getMachineClient">,
  clientId: string,
): Promise<void> {
  const machine = await store.getMachineClient(clientId);
  if (!machine) return;
  throw new OAuthError(
    400,
    "unauthorized_client",
    `This client_id is a machine client's: its only grant is ${machine.grantType}`,
  );
}
