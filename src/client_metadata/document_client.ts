/**
 * A client whose id is the URL of its metadata document: the document, fetched (or cached) and
 * validated, or the request's `invalid_request` naming what is wrong with it. Shared by every
 * endpoint that accepts such a client (`/authorize`, `/device_authorization`).
 */

import { ClientMetadataError } from "./document.ts";
import type { ClientMetadataFetcher } from "./fetcher.ts";
import { resolveClientMetadata } from "./resolver.ts";
import type { Clock } from "../clock.ts";
import type { GrantTypes } from "../clients/registration.ts";
import { OAuthError } from "../http/errors.ts";
import type { Logger } from "../logger.ts";
import type { Store } from "../store/mod.ts";
import type { ClientMetadataDocument } from "../store/records.ts";

/** What resolving a document uses. */
export interface DocumentClientDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  clientMetadataFetcher: ClientMetadataFetcher;
  /** The token endpoint's grant types, as a document's registration rules read them. */
  grantTypes: GrantTypes;
}

/** The client's document; throws 400 `invalid_request` when it cannot be had or is invalid. */
export async function clientDocumentOf(
  deps: DocumentClientDeps,
  clientId: string,
): Promise<ClientMetadataDocument> {
  const { store, clock, logger, clientMetadataFetcher: fetcher, grantTypes } = deps;
  try {
    return await resolveClientMetadata({ store, clock, logger, fetcher, grantTypes }, clientId);
  } catch (error) {
    if (!(error instanceof ClientMetadataError)) throw error;
    throw new OAuthError(400, "invalid_request", `Client metadata document: ${error.message}`);
  }
}
