/**
 * Machine callers at the gateway: an access token whose `sub` is `ci:<project_path>` (a GitLab
 * CI job, jwt_bearer grant) or `client:<client_id>` (an operator-registered client,
 * client_credentials) speaks for no person and has no session. Its rule is looked up again in
 * the rules in force on every call (by the CI claims the token carries, or by its client_id), so
 * a narrowed or removed rule bites at the next call; what the rule grants decides the call.
 *
 * @see docs/gateway.md "Machine callers"
 */

import { type MachineKind, machineKindOf, SUBJECT_PREFIXES } from "../jwt.ts";
import type { MachineAccessHolder } from "./holder.ts";
import {
  type CiClaims,
  ciRuleFor,
  clientRuleFor,
  type MachineAccess,
  type MachineGrant,
} from "./rules.ts";

/** What a CI job's access token says of the job (strings, as GitLab's ID token said them). */
export interface CiTokenClaims {
  ci_project: string;
  ci_project_id?: string;
  ci_namespace_id?: string;
  ci_ref: string;
  ci_ref_type: string;
  ci_ref_protected?: string;
  ci_environment?: string;
  ci_pipeline?: string;
  ci_job?: string;
}

/** The job a CI caller runs as: what its rule is matched on, and what the audit names. */
export interface CiJob extends CiClaims {
  pipeline?: string;
  job?: string;
}

/** A machine caller with the rule in force for it. */
export interface MachineCaller {
  kind: MachineKind;
  /** The token's `sub`. */
  subject: string;
  /** The client_id, for a client; the subject for a CI job (it has none). */
  clientId: string;
  grant: MachineGrant;
  /** The job, for a CI caller. */
  ci?: CiJob;
  /**
   * For a client, when the stored client it was admitted as was added (epoch ms): a stream it
   * opened holds only while that client is stored (gateway/open_streams.ts).
   */
  clientAddedAt?: number;
  /**
   * Whether the rules in force now still admit this caller at the MCP server `server`: a stream
   * it opened holds only while they do, as its next call would be refused otherwise.
   */
  admittedAt(server: string): boolean;
}

/** Thrown when no rule in force admits a machine caller; the message says why. */
export class MachineRefused extends Error {
  override name = "MachineRefused";
}

/** How the resource guard admits a machine caller's token (throws MachineRefused). */
export interface MachineAdmission {
  admit(claims: Readonly<Record<string, unknown>>): MachineCaller | Promise<MachineCaller>;
}

/** Admission by the rules `holder` has in force. */
export function createMachineAdmission(holder: MachineAccessHolder): MachineAdmission {
  return { admit: (claims) => machineCallerOf(holder, claims) };
}

/** The caller a verified machine token stands for, with its rule in force; throws MachineRefused. */
export function machineCallerOf(
  holder: MachineAccessHolder,
  claims: Readonly<Record<string, unknown>>,
): MachineCaller {
  const sub = String(claims.sub);
  const kind = machineKindOf(sub);
  const access = holder.current();
  if (kind === undefined || access === undefined) {
    throw new MachineRefused("This service admits no machine callers");
  }
  if (kind === "client") {
    const clientId = sub.slice(SUBJECT_PREFIXES.client.length);
    const ruleOf = (rules: MachineAccess) => clientRuleFor(rules, clientId);
    const rule = ruleOf(access);
    if (!rule) throw new MachineRefused("No rule of the machine access file admits this client");
    return { kind, subject: sub, clientId, grant: rule, admittedAt: admittedBy(holder, ruleOf) };
  }
  const job = ciJobOf(claims);
  if (job === undefined || `${SUBJECT_PREFIXES.ci}${job.project_path}` !== sub) {
    throw new MachineRefused("The access token lacks the CI job's claims");
  }
  const ruleOf = (rules: MachineAccess) => ciRuleFor(rules, job);
  const rule = ruleOf(access);
  if (!rule) throw new MachineRefused("No rule of the machine access file admits this CI job");
  const admittedAt = admittedBy(holder, ruleOf);
  return { kind, subject: sub, clientId: sub, grant: rule, ci: job, admittedAt };
}

/** Whether the rule `ruleOf` finds in the rules `holder` has in force now names a server. */
function admittedBy(
  holder: MachineAccessHolder,
  ruleOf: (rules: MachineAccess) => MachineGrant | undefined,
): (server: string) => boolean {
  return (server) => {
    const access = holder.current();
    return access !== undefined && ruleOf(access)?.servers.includes(server) === true;
  };
}

/** The job a CI caller's access token describes, or undefined when a claim is missing. */
function ciJobOf(claims: Readonly<Record<string, unknown>>): CiJob | undefined {
  const { ci_project, ci_ref, ci_ref_type } = claims;
  if (typeof ci_project !== "string" || typeof ci_ref !== "string") return undefined;
  if (typeof ci_ref_type !== "string") return undefined;
  return {
    project_path: ci_project,
    project_id: optionalString(claims.ci_project_id),
    namespace_id: optionalString(claims.ci_namespace_id),
    ref: ci_ref,
    ref_type: ci_ref_type,
    ref_protected: optionalString(claims.ci_ref_protected),
    environment: optionalString(claims.ci_environment),
    pipeline: optionalString(claims.ci_pipeline),
    job: optionalString(claims.ci_job),
  };
}

/** The claims a CI job's access token carries, from the job's verified ID-token claims. */
export function ciTokenClaims(job: CiJob): CiTokenClaims {
  return {
    ci_project: job.project_path,
    ci_project_id: job.project_id,
    ci_namespace_id: job.namespace_id,
    ci_ref: job.ref,
    ci_ref_type: job.ref_type,
    ci_ref_protected: job.ref_protected,
    ci_environment: job.environment,
    ci_pipeline: job.pipeline,
    ci_job: job.job,
  };
}

function optionalString(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}
