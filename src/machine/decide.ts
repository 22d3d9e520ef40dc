/**
 * What a machine caller may call through the gateway: the tools its rule's `tools` patterns
 * allow (every tool when the rule names none); every other method (resources, prompts, the
 * protocol's own) passes. MCP_POLICY_FILE is for people and never asked.
 */

import type { CallDecision, Target } from "../access/call_policy.ts";
import { type MachineGrant, toolAllowed } from "./rules.ts";

/** Decides one named call. */
export type Decide = (target: Target, name: string) => CallDecision;

const ALLOW: CallDecision = { effect: "allow" };
const DENY: CallDecision = { effect: "deny" };

/** The decider of `grant`'s tool limits; undefined when it has none (every call passes). */
export function machineDecider(grant: MachineGrant): Decide | undefined {
  if (grant.tools === undefined) return undefined;
  return (target, name) => {
    if (target !== "tools") return ALLOW;
    if (name === "") return { effect: "deny", invalid: "name must be a non-empty string" };
    return toolAllowed(grant, name) ? ALLOW : DENY;
  };
}
