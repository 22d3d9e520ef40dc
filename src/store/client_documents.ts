/** Cached Client ID Metadata Documents, shared by every instance, kept for their cache lifetime. */

import type { StoreIo } from "./io.ts";
import { clientDocumentKey } from "./keys.ts";
import type { ClientDocumentRecord } from "./records.ts";

/** The metadata document cache of the store. */
export interface ClientDocumentStore {
  /** The cached document of `url` while it is kept, or null. */
  getClientDocument(url: string): Promise<ClientDocumentRecord | null>;
  /** Caches a document until its `expiresAt` (last writer wins: both fetched the same URL). */
  saveClientDocument(url: string, record: ClientDocumentRecord): Promise<void>;
}

/** The cache over the shared KV access. */
export function createClientDocumentStore(io: StoreIo): ClientDocumentStore {
  return {
    async getClientDocument(url) {
      const entry = await io.read<ClientDocumentRecord>(clientDocumentKey(url));
      return entry && io.isLive(entry.value) ? entry.value : null;
    },
    async saveClientDocument(url, record) {
      const key = clientDocumentKey(url);
      const write = io.atomic().set(key, record, { expireIn: io.ttlUntil(record.expiresAt) });
      await io.commit(write);
    },
  };
}
