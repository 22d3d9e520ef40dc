/** Registered-client records (RFC 7591), kept until deleted. */

import type { StoreIo } from "./io.ts";
import { clientKey } from "./keys.ts";
import type { ClientRecord } from "./records.ts";

/** The client operations of the store. */
export interface ClientStore {
  /** Stores a new client registration. */
  registerClient(client: ClientRecord): Promise<void>;
  /** A registered client, or null. */
  getClient(clientId: string): Promise<ClientRecord | null>;
}

/** Longer than any client id we issue, well under KV's key size limit even in UTF-8. */
const MAX_CLIENT_ID_LENGTH = 256;

/** Client records over the shared KV access. */
export function createClientStore(io: StoreIo): ClientStore {
  return {
    async registerClient(client) {
      const key = clientKey(client.clientId);
      if (!await io.commit(io.atomic().check({ key, versionstamp: null }).set(key, client))) {
        throw new Error("client id collision");
      }
    },

    async getClient(clientId) {
      // Any client_id reaches here; KV refuses keys over ~2 KiB (a TypeError, so a 500), and
      // the ids we issue are short, so a long one is simply unknown.
      if (clientId.length > MAX_CLIENT_ID_LENGTH) return null;
      return (await io.read<ClientRecord>(clientKey(clientId)))?.value ?? null;
    },
  };
}
