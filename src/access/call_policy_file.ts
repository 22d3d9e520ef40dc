/**
 * MCP_POLICY_FILE: the policy read from its file at start-up (a problem stops start-up with one
 * line naming the file), and the holder the gateway reads it from, which main.ts reloads on
 * SIGHUP: a new file that cannot be used leaves the policy in force as it was.
 */

import { ConfigError } from "../config/variable.ts";
import { unreadableReason } from "../config/unreadable.ts";
import { readConfigurationFile } from "../config/bounded_read.ts";
import {
  type CallPolicy,
  parseCallPolicy,
  PolicyError,
  policyGroups,
  unknownRoleIn,
} from "./call_policy.ts";
import type { AccessPolicy, ProviderRoles } from "./policy.ts";
import { GITLAB_PROVIDER_ROLES } from "../upstream/gitlab.ts";
import { type AccessRules, accessRulesOf } from "./rules.ts";

/** A policy and the file it came from. */
export interface PolicyFile {
  path: string;
  policy: CallPolicy;
}

/** Reads and parses the policy file at `path`. Throws PolicyError naming the file. */
export function readPolicyFile(
  path: string,
  readText: (path: string) => string = readConfigurationFile,
): PolicyFile {
  let text: string;
  try {
    text = readText(path);
  } catch (error) {
    throw new PolicyError(`${path}: cannot read the file (${unreadableReason(error)})`);
  }
  try {
    return { path, policy: parseCallPolicy(text) };
  } catch (error) {
    if (!(error instanceof PolicyError)) throw error;
    throw new PolicyError(`${path}: ${error.message}`);
  }
}

/** The configuration's parser of MCP_POLICY_FILE: the file read and parsed once. */
export function parsePolicyFile(name: string, path: string): PolicyFile {
  try {
    return readPolicyFile(path);
  } catch (error) {
    if (!(error instanceof PolicyError)) throw error;
    throw new ConfigError(name, error.message);
  }
}

/** The outcome of a reload. */
export type Reload =
  | { kind: "reloaded"; path: string; rules: number }
  | { kind: "kept"; path: string; problem: string }
  | { kind: "none" };

/** The policy in force, replaced only by a reload that succeeds. */
export interface CallPolicyHolder {
  /** The policy in force; undefined: no MCP_POLICY_FILE, every call passes. */
  current(): CallPolicy | undefined;
  /** MCP_POLICY_FILE's path; undefined when it is unset. */
  path(): string | undefined;
  /**
   * Reads the file again (through `readText` when given: the text a watch saw hold still); a
   * file that cannot be used (a role the provider does not declare included) keeps the policy
   * in force.
   */
  reload(readText?: (path: string) => string): Reload;
  /**
   * The groups named beside this policy whose memberships are learnt too (the MCP servers' own
   * `policy_file`s and lists).
   */
  otherGroups(): readonly string[];
  /** Refuses (throws ConfigError or PolicyError) a policy the service cannot enforce. */
  check(policy: CallPolicy): void;
  /**
   * Who may sign in as the lists in force say it: worked out again by a reload and by
   * `regroup` (only they replace it), read by every request.
   */
  rules: AccessRules;
  /** Works `rules` out again after the other groups changed (MCP_SERVERS_FILE reloaded). */
  regroup(): void;
}

/**
 * A holder starting with `initial`; `check` refuses a policy the service cannot enforce (it
 * throws ConfigError or PolicyError), as start-up does. `servicePolicy` is ALLOWED_GITLAB_GROUPS
 * and ALLOWED_GITLAB_USERS, which `rules` carry with the provider's `roles` (by default GitLab's,
 * the provider UPSTREAM_PROVIDER chooses unless told otherwise).
 */
export function createCallPolicyHolder(
  initial: PolicyFile | undefined,
  check: (policy: CallPolicy) => void,
  readText?: (path: string) => string,
  otherGroups: () => readonly string[] = () => [],
  servicePolicy: AccessPolicy = { groups: [], users: [] },
  roles: ProviderRoles = GITLAB_PROVIDER_ROLES,
): CallPolicyHolder {
  let inForce = initial;
  const holder: CallPolicyHolder = {
    current: () => inForce?.policy,
    otherGroups,
    check,
    path: () => inForce?.path,
    rules: accessRulesOf(servicePolicy, [], initial?.policy, roles),
    regroup() {
      holder.rules = accessRulesOf(
        servicePolicy,
        heldPolicyGroups(holder),
        inForce?.policy,
        roles,
      );
    },
    reload(settled) {
      if (inForce === undefined) return { kind: "none" };
      const { path } = inForce;
      try {
        const next = readPolicyFile(path, settled ?? readText);
        const unknownRole = unknownRoleIn(next.policy, roles);
        if (unknownRole) throw new PolicyError(`${path}: ${unknownRole}`);
        check(next.policy);
        inForce = next;
        holder.regroup();
        return { kind: "reloaded", path, rules: next.policy.rules.length };
      } catch (error) {
        if (!(error instanceof PolicyError || error instanceof ConfigError)) throw error;
        return { kind: "kept", path, problem: error.message };
      }
    },
  };
  holder.regroup();
  return holder;
}

/**
 * The groups the policies in force name (MCP_POLICY_FILE's, and the servers' own policies and
 * lists): their memberships are learnt at sign-in, whichever server the sign-in is for, since a
 * token's session is re-checked against the same lists.
 */
function heldPolicyGroups(holder: CallPolicyHolder): string[] {
  const current = holder.current();
  return [...new Set([...(current ? policyGroups(current) : []), ...holder.otherGroups()])];
}
