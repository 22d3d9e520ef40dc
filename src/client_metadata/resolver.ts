/**
 * A metadata document client's document, from the KV cache or fetched: used without a fetch
 * for its `max-age` (at most 24 hours); kept for at least 5 minutes, during which a failed
 * refetch falls back to the kept copy; after that, a document that cannot be fetched is an
 * error.
 *
 * @see draft-ietf-oauth-client-id-metadata-document §4.4 (caching)
 */

import type { GrantTypes } from "../clients/registration.ts";
import type { Clock } from "../clock.ts";
import type { Logger } from "../logger.ts";
import type { Store } from "../store/mod.ts";
import type { ClientDocumentRecord } from "../store/records.ts";
import {
  type ClientMetadataDocument,
  ClientMetadataError,
  clientMetadataUrl,
  parseClientMetadataDocument,
} from "./document.ts";
import type { ClientMetadataFetcher } from "./fetcher.ts";

/** The shortest and the longest time a document is kept. */
export const MIN_CACHE_SECONDS = 5 * 60;
export const MAX_CACHE_SECONDS = 24 * 60 * 60;

/** What resolving a document needs. */
export interface ResolverDeps {
  store: Pick<Store, "getClientDocument" | "saveClientDocument">;
  clock: Clock;
  logger: Logger;
  fetcher: ClientMetadataFetcher;
  /** The grant types a document may list, and those one that lists none gets. */
  grantTypes: GrantTypes;
}

/** The valid document of a metadata document client id; throws ClientMetadataError. */
export async function resolveClientMetadata(
  deps: ResolverDeps,
  clientId: string,
): Promise<ClientMetadataDocument> {
  const url = clientMetadataUrl(clientId);
  const cached = await deps.store.getClientDocument(clientId);
  if (cached && deps.clock.now() < cached.refreshAfter) return cached.document;
  let fetched: ClientDocumentRecord;
  try {
    fetched = await fetchRecord(deps, url, clientId);
  } catch (error) {
    if (!(error instanceof ClientMetadataError) || !cached) throw error;
    deps.logger.warn("client metadata refetch failed; using the cached copy", {
      clientId,
      error: error.message,
    });
    return cached.document;
  }
  await deps.store.saveClientDocument(clientId, fetched);
  return fetched.document;
}

async function fetchRecord(
  deps: ResolverDeps,
  url: URL,
  clientId: string,
): Promise<ClientDocumentRecord> {
  const { body, maxAgeSeconds } = await deps.fetcher.fetchDocument(url);
  const document = parseClientMetadataDocument(body, clientId, deps.grantTypes);
  const now = deps.clock.now();
  const maxAge = Math.min(maxAgeSeconds ?? MIN_CACHE_SECONDS, MAX_CACHE_SECONDS);
  return {
    document,
    refreshAfter: now + maxAge * 1000,
    expiresAt: now + Math.max(maxAge, MIN_CACHE_SECONDS) * 1000,
  };
}
