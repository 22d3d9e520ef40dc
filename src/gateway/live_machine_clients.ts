/**
 * A machine client's tokens end with the client: `admin clients delete` removes its record, and
 * the gateway, which admits a machine caller afresh on every call (never from memory), also
 * requires its client to be stored still. One store read per call; the operator's delete is
 * refused from the next call on every instance sharing the store.
 */

import {
  createMachineAdmission,
  type MachineAdmission,
  MachineRefused,
} from "../machine/caller.ts";
import type { MachineAccessHolder } from "../machine/holder.ts";
import type { Store } from "../store/mod.ts";

/** `admission`, refusing a client caller whose machine client was deleted. */
export function requireLiveMachineClients(
  admission: MachineAdmission,
  store: Pick<Store, "getMachineClient">,
): MachineAdmission {
  return {
    async admit(claims) {
      const caller = await admission.admit(claims);
      if (caller.kind === "client" && !await store.getMachineClient(caller.clientId)) {
        throw new MachineRefused("The client was deleted");
      }
      return caller;
    },
  };
}

/** The gateway's admission: by the rules `deps` holds in force, of clients still stored. */
export function liveMachineAdmission(
  deps: { machineAccess: MachineAccessHolder; store: Pick<Store, "getMachineClient"> },
): MachineAdmission {
  return requireLiveMachineClients(createMachineAdmission(deps.machineAccess), deps.store);
}
