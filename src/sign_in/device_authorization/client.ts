/**
 * Which client asks for a device authorization, under the client policy of `/authorize`: a
 * registered client, a Client ID Metadata Document, or (under the spec's default policy) an
 * unknown client, shown as unknown. A known client must list the device grant.
 */

import { isClientMetadataUrl } from "../../client_metadata/client_id.ts";
import type { ClientsConfig } from "../../clients/config.ts";
import {
  clientDocumentOf,
  type DocumentClientDeps,
} from "../../client_metadata/document_client.ts";
import { refuseMachineClient, requireListedGrant } from "../../clients/grant_check.ts";
import { DEVICE_CODE_GRANT_TYPE } from "../../http/grant_types.ts";
import { OAuthError } from "../../http/errors.ts";
import type { ClientRecord } from "../../store/records.ts";

/** Who the client is, as far as the service can tell (what the sign-in pages show). */
export interface DeviceClient {
  clientName?: string;
  /** The host of a metadata document client id: its name is that host's word. */
  verifiedHost?: string;
  /** The client's registration, when it has one: using it keeps it alive. */
  registration?: ClientRecord;
}

/** What identifying the client uses. */
export interface DeviceClientDeps extends DocumentClientDeps {
  config: Pick<ClientsConfig, "redirectUriPolicy">;
}

/**
 * The client of `clientId`; throws 401 `invalid_client` for an unknown one under
 * REDIRECT_URI_POLICY=registered, 400 `unauthorized_client` for one not allowed the grant (a
 * machine client among them).
 */
export async function identifyDeviceClient(
  deps: DeviceClientDeps,
  clientId: string,
): Promise<DeviceClient> {
  if (isClientMetadataUrl(clientId)) {
    const document = await clientDocumentOf(deps, clientId);
    requireListedGrant(document.grantTypes ?? deps.grantTypes.defaults, DEVICE_CODE_GRANT_TYPE);
    return { clientName: document.clientName, verifiedHost: new URL(clientId).host };
  }
  const registration = await deps.store.getClient(clientId);
  if (!registration) {
    await refuseMachineClient(deps.store, clientId);
    if (deps.config.redirectUriPolicy === "registered") {
      throw new OAuthError(401, "invalid_client", "Unknown client_id");
    }
    return {};
  }
  requireListedGrant(registration.metadata.grant_types, DEVICE_CODE_GRANT_TYPE);
  return { clientName: registration.clientName, registration };
}
