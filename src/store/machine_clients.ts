/**
 * Operator-registered machine clients (`admin clients add`): clients that act for themselves
 * with the client_credentials grant (RFC 6749 §4.4) and authenticate at the token endpoint with
 * a key pair (`private_key_jwt`) or a secret. They live until `admin clients delete`; a secret is
 * kept only as its SHA-256 (it is 256 random bits, so a fast hash gives nothing to guess), and
 * the keys only as public JWKs.
 */

import type { StoreIo } from "./io.ts";
import { clientKey, machineClientKey, recordPrefix } from "./keys.ts";

/** How a machine client proves who it is. */
export type MachineClientCredential =
  /** RFC 7523 §2.2 assertions signed with one of these public keys. */
  | { method: "private_key_jwt"; jwks: { keys: JsonWebKey[] } }
  /** `client_secret_basic` or `client_secret_post` with the secret whose SHA-256 this is. */
  | { method: "client_secret"; secretHash: string };

/** A machine client, as `admin clients add` stored it. */
export interface MachineClientRecord {
  clientId: string;
  name: string;
  /** The one grant it may use. */
  grantType: "client_credentials";
  credential: MachineClientCredential;
  /** Epoch ms. */
  createdAt: number;
}

/** The machine-client operations of the store. */
export interface MachineClientStore {
  /**
   * Stores a new machine client; false when its id is taken (by a machine client or a
   * registered one), and nothing is written.
   */
  addMachineClient(client: MachineClientRecord): Promise<boolean>;
  /** The machine client `clientId`, or null. */
  getMachineClient(clientId: string): Promise<MachineClientRecord | null>;
  /** Every machine client, oldest first. */
  listMachineClients(): Promise<MachineClientRecord[]>;
  /** Deletes a machine client; false when there was none. */
  deleteMachineClient(clientId: string): Promise<boolean>;
}

/** As for registered clients: longer than any id, well under the key size limit. */
const MAX_CLIENT_ID_LENGTH = 256;

/** Machine-client records over the shared KV access. */
export function createMachineClientStore(io: StoreIo): MachineClientStore {
  return {
    async addMachineClient(client) {
      const key = machineClientKey(client.clientId);
      // One id names one client: neither a machine client nor a registration may hold it.
      const op = io.atomic()
        .check({ key, versionstamp: null })
        .check({ key: clientKey(client.clientId), versionstamp: null })
        .set(key, client);
      return await io.commit(op);
    },

    async getMachineClient(clientId) {
      if (clientId.length > MAX_CLIENT_ID_LENGTH) return null;
      return (await io.read<MachineClientRecord>(machineClientKey(clientId)))?.value ?? null;
    },

    async listMachineClients() {
      const clients: MachineClientRecord[] = [];
      for await (const entry of io.list<MachineClientRecord>(recordPrefix("machine_client"))) {
        clients.push(entry.value);
      }
      return clients.sort((a, b) => a.createdAt - b.createdAt);
    },

    async deleteMachineClient(clientId) {
      if (clientId.length > MAX_CLIENT_ID_LENGTH) return false;
      const stored = await io.read<MachineClientRecord>(machineClientKey(clientId));
      if (!stored) return false;
      return await io.commit(io.atomic().check(stored).delete(stored.key));
    },
  };
}
