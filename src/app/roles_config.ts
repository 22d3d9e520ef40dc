/**
 * The roles the configuration names (`group:role` in ALLOWED_GITLAB_GROUPS, the policy files and
 * the servers file's `allowed_gitlab_groups`) are the provider's: the parsers keep a role's name
 * as written, and these checks, run once the provider is chosen (start-up, `admin config check`,
 * and every reload of a policy or servers file), refuse a name the provider does not declare
 * with one line naming the variable, the file and the entry, and the roles there are.
 *
 * @see docs/security.md "Who can sign in"
 */

import { ACCESS_VARIABLES, type AccessConfig, accessPolicyOf } from "../access/config.ts";
import { type CallPolicy, unknownRoleIn } from "../access/call_policy.ts";
import type { PolicyFile } from "../access/call_policy_file.ts";
import { type ProviderRoles, unknownRole } from "../access/policy.ts";
import { ConfigError } from "../config/variable.ts";
import { GATEWAY_VARIABLES } from "../gateway/config.ts";
import { SERVERS_VARIABLES } from "../servers/config.ts";
import type { ServersFile } from "../servers/file.ts";
import type { ProviderDescription } from "../upstream/oauth_provider.ts";

/** What the role checks read of the configuration. */
export interface RolesConfig extends Pick<AccessConfig, "access"> {
  mcpPolicyFile?: PolicyFile;
  mcpServersFile?: Pick<ServersFile, "path" | "servers">;
}

/** A provider's declared roles; one that declares none has no role to name. */
export function rolesOf(provider: ProviderDescription): ProviderRoles {
  return provider.roles ?? { levels: {} };
}

/** Every check below; each throws ConfigError naming its own variable. */
export function requireKnownRoles(config: RolesConfig, roles: ProviderRoles): void {
  requireListedRoles(config, roles);
  requirePolicyFileRoles(config, roles);
  requireServersFileRoles(config, roles);
}

/** ALLOWED_GITLAB_GROUPS names only the provider's roles. */
export function requireListedRoles(config: RolesConfig, roles: ProviderRoles): void {
  for (const group of accessPolicyOf(config).groups) {
    const problem = unknownRole(group, roles);
    if (problem) throw new ConfigError(ACCESS_VARIABLES.access.groups.name, problem);
  }
}

/** MCP_POLICY_FILE's rules name only the provider's roles. */
export function requirePolicyFileRoles(config: RolesConfig, roles: ProviderRoles): void {
  const file = config.mcpPolicyFile;
  const problem = file && policyProblem(file, roles);
  if (problem) throw new ConfigError(GATEWAY_VARIABLES.mcpPolicyFile.name, problem);
}

/** MCP_SERVERS_FILE's lists and its servers' own policy files name only the provider's roles. */
export function requireServersFileRoles(config: RolesConfig, roles: ProviderRoles): void {
  if (config.mcpServersFile) requireServerRoles(config.mcpServersFile, roles);
}

/** A servers file's lists and policies name only the provider's roles (start-up and reloads). */
export function requireServerRoles(
  file: Pick<ServersFile, "path" | "servers">,
  roles: ProviderRoles,
): void {
  const fail = (where: string, problem: string): never => {
    throw new ConfigError(
      SERVERS_VARIABLES.mcpServersFile.name,
      `${file.path}: ${where}: ${problem}`,
    );
  };
  for (const entry of file.servers) {
    const where = `server ${entry.name}`;
    for (const group of entry.lists?.groups ?? []) {
      const problem = unknownRole(group, roles);
      if (problem) fail(`${where} allowed_gitlab_groups`, problem);
    }
    const problem = entry.policy && policyProblem(entry.policy, roles);
    if (problem) fail(`${where} policy_file`, problem);
  }
}

/** A policy file's unknown role, as its parser words a problem (`<path>: rule …`). */
function policyProblem(file: { path: string; policy: CallPolicy }, roles: ProviderRoles) {
  const problem = unknownRoleIn(file.policy, roles);
  return problem && `${file.path}: ${problem}`;
}
