/**
 * A machine client's tokens end with the client: `admin clients delete` removes its record, and
 * the gateway, which admits a machine caller afresh on every call (never from memory), also
 * requires its client to be stored still, as added when the token was issued (a client deleted
 * and added again under its id, with a new key after a leak say, does not bring its old tokens
 * back). One store read per call; the operator's delete is refused from the next call on every
 * instance sharing the store.
 */

import {
  createMachineAdmission,
  type MachineAdmission,
  MachineRefused,
} from "../machine/caller.ts";
import type { MachineAccessHolder } from "../machine/holder.ts";
import { CLIENT_ADDED_CLAIM } from "../machine/token.ts";
import type { Store } from "../store/mod.ts";

/** `admission`, refusing a client caller whose machine client was deleted. */
export function requireLiveMachineClients(
  admission: MachineAdmission,
  store: Pick<Store, "getMachineClient">,
): MachineAdmission {
  return {
    async admit(claims) {
      const caller = await admission.admit(claims);
      if (caller.kind !== "client") return caller;
      const client = await store.getMachineClient(caller.clientId);
      if (!client) throw new MachineRefused("The client was deleted");
      // Tokens from before the claim name no time and pass (they end within ACCESS_TOKEN_TTL).
      const added = claims[CLIENT_ADDED_CLAIM];
      if (added !== undefined && added !== String(client.createdAt)) {
        throw new MachineRefused("The client was deleted (and added again since)");
      }
      return { ...caller, clientAddedAt: client.createdAt };
    },
  };
}

/** The gateway's admission: by the rules `deps` holds in force, of clients still stored. */
export function liveMachineAdmission(
  deps: { machineAccess: MachineAccessHolder; store: Pick<Store, "getMachineClient"> },
): MachineAdmission {
  return requireLiveMachineClients(createMachineAdmission(deps.machineAccess), deps.store);
}
