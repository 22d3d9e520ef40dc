/**
 * MACHINE_ACCESS_FILE's rules as the service holds them, and how a machine caller finds its
 * rule: a CI job by the claims of its GitLab ID token (the first rule whose every condition
 * matches), an operator-registered client by its client_id. A rule says which MCP servers the
 * caller may reach, which tools it may call there, and which GitLab token those servers receive.
 *
 * @see docs/gateway.md "Machine callers"
 */

/** A pattern as written, and its matcher. */
export interface Glob {
  pattern: string;
  matcher: RegExp;
}

/** A GitLab token read from a rule's `gitlab_token_file`: never written out by accident. */
export class GitLabTokenSecret {
  readonly #value: string;
  constructor(value: string) {
    this.#value = value;
  }
  /** The token, for the header the MCP server receives. */
  reveal(): string {
    return this.#value;
  }
  toJSON(): string {
    return "[redacted]";
  }
}

/** What a rule grants: servers, tools, and the MCP servers' GitLab token. */
export interface MachineGrant {
  /** Where the rule is in the file, for messages: `ci rule 0`, `client rule 2`. */
  where: string;
  /** MCP server names (`default` is the one at /mcp). */
  servers: string[];
  /** Allow patterns of the tools it may call; undefined: every tool. */
  tools?: Glob[];
  /** The GitLab token the MCP servers receive; undefined: none. */
  gitlabToken?: GitLabTokenSecret;
}

/** A rule for GitLab CI jobs. */
export interface CiRule extends MachineGrant {
  /** At least one of `project`, `projectIds`, `namespaceIds` is set (access_file.ts checks). */
  project?: Glob;
  /** GitLab project ids, one of which the job's `project_id` must be. */
  projectIds?: readonly string[];
  /** GitLab namespace ids (the project's own group), one of which `namespace_id` must be. */
  namespaceIds?: readonly string[];
  ref?: Glob;
  refType?: "branch" | "tag";
  refProtected?: boolean;
  environment?: Glob;
}

/** A rule for an operator-registered client. */
export interface ClientRule extends MachineGrant {
  clientId: string;
}

/** The parsed file. */
export interface MachineAccess {
  path: string;
  ci: CiRule[];
  clients: ClientRule[];
  /** The rules' `gitlab_token_file`s, read with the file: a change to one reloads the rules. */
  tokenFiles: readonly string[];
}

/** The ID-token claims a CI rule matches; GitLab sends each as a string. */
export interface CiClaims {
  project_path: string;
  project_id?: string;
  namespace_id?: string;
  ref: string;
  ref_type: string;
  ref_protected?: string;
  environment?: string;
}

/** The first CI rule that admits a job with `claims`, or undefined. */
export function ciRuleFor(access: MachineAccess, claims: CiClaims): CiRule | undefined {
  return access.ci.find((rule) => ciRuleMatches(rule, claims));
}

function ciRuleMatches(rule: CiRule, claims: CiClaims): boolean {
  if (!rule.project && !rule.projectIds && !rule.namespaceIds) return false;
  if (rule.project && !rule.project.matcher.test(claims.project_path)) return false;
  if (!idAmong(rule.projectIds, claims.project_id)) return false;
  if (!idAmong(rule.namespaceIds, claims.namespace_id)) return false;
  if (rule.ref && !rule.ref.matcher.test(claims.ref)) return false;
  if (rule.refType !== undefined && rule.refType !== claims.ref_type) return false;
  if (rule.refProtected !== undefined && claims.ref_protected !== String(rule.refProtected)) {
    return false;
  }
  if (rule.environment) {
    return claims.environment !== undefined && rule.environment.matcher.test(claims.environment);
  }
  return true;
}

/** Whether `id` is one of `ids` (a job without the claim is not); true when the rule names none. */
function idAmong(ids: readonly string[] | undefined, id: string | undefined): boolean {
  return ids === undefined || (id !== undefined && ids.includes(id));
}

/** The rule of the client `clientId`, or undefined. */
export function clientRuleFor(access: MachineAccess, clientId: string): ClientRule | undefined {
  return access.clients.find((rule) => rule.clientId === clientId);
}

/** Whether `grant` lets its caller call the tool `name`. */
export function toolAllowed(grant: MachineGrant, name: string): boolean {
  return grant.tools === undefined || grant.tools.some((tool) => tool.matcher.test(name));
}
