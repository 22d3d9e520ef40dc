/**
 * Registered-client records (RFC 7591). A registration no `/authorize` has used within a day is
 * forgotten; a used one lives 30 days after its last use (`expiresAt`, checked on read;
 * `expireIn` collects the garbage).
 */

import type { StoreIo } from "./io.ts";
import { clientKey } from "./keys.ts";
import type { ClientRecord } from "./records.ts";

/** How long a registration lives before its first use. */
export const UNUSED_CLIENT_TTL_MS = 24 * 60 * 60 * 1000;
/** How long a registration lives after its last use. */
export const USED_CLIENT_TTL_MS = 30 * 24 * 60 * 60 * 1000;
/**
 * A use renews the registration only when less than this is left, so a busy client costs one
 * write a day, not one per `/authorize`: its life after the last use is 29 to 30 days.
 */
const RENEW_BELOW_MS = USED_CLIENT_TTL_MS - 24 * 60 * 60 * 1000;

/** The client operations of the store. */
export interface ClientStore {
  /** Stores a new client registration, to be forgotten unless used within a day. */
  registerClient(client: ClientRecord): Promise<void>;
  /** A registered client that has not expired, or null. */
  getClient(clientId: string): Promise<ClientRecord | null>;
  /** Records that `/authorize` used the client: it lives 30 days from now (written at most daily). */
  recordClientUse(client: ClientRecord): Promise<void>;
}

/** Longer than any client id we issue, well under KV's key size limit even in UTF-8. */
const MAX_CLIENT_ID_LENGTH = 256;

/** Client records over the shared KV access. */
export function createClientStore(io: StoreIo): ClientStore {
  return {
    async registerClient(client) {
      const key = clientKey(client.clientId);
      const stored = { ...client, expiresAt: io.clock.now() + UNUSED_CLIENT_TTL_MS };
      const op = io.atomic().check({ key, versionstamp: null })
        .set(key, stored, { expireIn: io.ttlUntil(stored.expiresAt) });
      if (!await io.commit(op)) throw new Error("client id collision");
    },

    async getClient(clientId) {
      // Any client_id reaches here; KV refuses keys over ~2 KiB (a TypeError, so a 500), and
      // the ids we issue are short, so a long one is simply unknown.
      if (clientId.length > MAX_CLIENT_ID_LENGTH) return null;
      const client = (await io.read<ClientRecord>(clientKey(clientId)))?.value ?? null;
      // Registrations stored before they had an expiry count as used: they get one on next use.
      const expiresAt = client?.expiresAt;
      return expiresAt === undefined || io.isLive({ expiresAt }) ? client : null;
    },

    async recordClientUse(client) {
      const now = io.clock.now();
      if (client.expiresAt !== undefined && client.expiresAt - now > RENEW_BELOW_MS) return;
      const expiresAt = now + USED_CLIENT_TTL_MS;
      // Checked against the stored registration (read again only on a renewal, at most daily):
      // an operator's `clients delete` since the caller's read must not be undone. Concurrent
      // uses write about the same expiry, so a failed check needs no retry.
      const stored = await io.read<ClientRecord>(clientKey(client.clientId));
      if (!stored) return;
      const op = io.atomic().check(stored)
        .set(stored.key, { ...stored.value, expiresAt }, { expireIn: io.ttlUntil(expiresAt) });
      await io.commit(op);
    },
  };
}
