/**
 * Which rules decide a request's calls: a person's are MCP_POLICY_FILE's (when it is set), a
 * machine caller's are its rule in MACHINE_ACCESS_FILE, which must also name this MCP server.
 *
 * @see docs/gateway.md "What they may call", "Machine callers"
 */

import type { Caller, CallPolicy } from "../access/call_policy.ts";
import { decideCall } from "../access/call_policy.ts";
import { type Decide, machineDecider } from "../machine/decide.ts";
import { learnPolicyTools } from "./answer_lists.ts";
import { callerOf } from "./call_check.ts";
import { BearerChallengeError } from "./challenges.ts";
import type { Gateway } from "./deps.ts";
import type { GatewayRequest } from "./guard.ts";

/** The decider of a request's calls (undefined: every call passes), and the person behind it. */
export interface CallRules {
  decide?: Decide;
  caller?: Caller;
}

/**
 * The rules for `auth` at `gateway`; a machine caller whose rule does not name this server is
 * refused (401), as a token for another server is.
 */
export function callRulesFor(
  gateway: Gateway,
  auth: GatewayRequest,
  policy: CallPolicy | undefined,
  resource: string,
): CallRules {
  if (auth.machine) {
    if (!auth.machine.grant.servers.includes(gateway.server)) {
      throw BearerChallengeError.invalidToken(
        resource,
        "The machine access file does not admit this caller at this MCP server",
      );
    }
    return { decide: machineDecider(auth.machine.grant) };
  }
  if (!policy) return {};
  learnPolicyTools(gateway, policy);
  const { roles, policy: lists } = gateway.deps.callPolicy.rules;
  const caller = callerOf(auth, lists.groups.map((group) => group.path));
  return { caller, decide: (target, name) => decideCall(policy, caller, target, name, roles) };
}
