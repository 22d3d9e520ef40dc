/**
 * What a servers file's `gitlab_scopes` must satisfy, at start-up and on every reload.
 *
 * @see docs/gateway.md "Several MCP servers"
 */

import { accessPolicyOf } from "../access/config.ts";
import { type CallPolicy, policyGroups } from "../access/call_policy.ts";
import { ConfigError } from "../config/variable.ts";
import { SERVERS_VARIABLES } from "../servers/config.ts";
import type { ServersFile } from "../servers/file.ts";
import {
  MEMBERSHIP_SCOPES,
  requireMembershipScope,
  scopeList,
  UPSTREAM_VARIABLES,
  type UpstreamConfig,
} from "../upstream/config.ts";

/**
 * A server's `gitlab_scopes` are a part of GITLAB_SCOPES as written. Every sign-in reads the
 * memberships of the groups any list or policy names, with the token of that sign-in: then
 * GITLAB_SCOPES, and each server's own scopes, need `read_api` or `api`.
 */
export function requireServerScopes(
  config: {
    upstream: UpstreamConfig["upstream"];
    access: Parameters<typeof accessPolicyOf>[0]["access"];
    mcpPolicyFile?: { policy: CallPolicy };
  },
  file: Pick<ServersFile, "path" | "servers">,
): void {
  const variable = SERVERS_VARIABLES.mcpServersFile.name;
  const { servers } = file;
  // A server's own list or policy naming groups reads memberships as ALLOWED_GITLAB_GROUPS does.
  if (servers.some((entry) => (entry.lists?.groups.length ?? 0) > 0 || namesGroups(entry.policy))) {
    requireMembershipScope(config, variable);
  }
  const configured = scopeList(config.upstream.scopes);
  const readsGroups = accessPolicyOf(config).groups.length > 0 ||
    namesGroups(config.mcpPolicyFile) ||
    servers.some((entry) => (entry.lists?.groups.length ?? 0) > 0 || namesGroups(entry.policy));
  for (const entry of servers) {
    if (entry.gitlabScopes === undefined) continue;
    const where = `${file.path}: server ${entry.name} gitlab_scopes`;
    const scopes = scopeList(entry.gitlabScopes);
    const stranger = scopes.find((scope) => !configured.includes(scope));
    if (stranger !== undefined) {
      throw new ConfigError(
        variable,
        `${where}: ${
          JSON.stringify(stranger)
        } is not in ${UPSTREAM_VARIABLES.upstream.scopes.name} ` +
          `(${JSON.stringify(config.upstream.scopes)})`,
      );
    }
    if (readsGroups && !scopes.some((scope) => MEMBERSHIP_SCOPES.includes(scope))) {
      throw new ConfigError(
        variable,
        `${where}: needs read_api or api, as sign-ins read group memberships for the lists ` +
          `and policies (it is ${JSON.stringify(entry.gitlabScopes)})`,
      );
    }
  }
}

function namesGroups(file: { policy: CallPolicy } | undefined): boolean {
  return file !== undefined && policyGroups(file.policy).length > 0;
}
