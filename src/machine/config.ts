/**
 * The machine callers' configuration: MACHINE_ACCESS_FILE, the rules of GitLab CI jobs and
 * operator-registered clients (without it neither grant is served).
 */

import { urlWithoutTrailingSlash } from "../config/parsers.ts";
import { ConfigError, type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import { MachineAccessError, readMachineAccess } from "./access_file.ts";
import { requireKnownServers } from "./holder.ts";
import type { MachineAccess } from "./rules.ts";

/** The configuration's parser of MACHINE_ACCESS_FILE: the file read and checked once. */
function parseMachineAccessFile(name: string, path: string): MachineAccess {
  try {
    return readMachineAccess(path);
  } catch (error) {
    if (!(error instanceof MachineAccessError)) throw error;
    throw new ConfigError(name, error.message);
  }
}

export const MACHINE_VARIABLES = {
  /** Which machine callers may call which MCP servers' tools. Undefined: none may. */
  machineAccessFile: variable(
    "MACHINE_ACCESS_FILE",
    undefined,
    parseMachineAccessFile,
    "rules for GitLab CI jobs and machine clients (YAML or JSON; [machine callers](#machine-callers))",
  ),
  /** The `iss` of GitLab's ID tokens where it differs from GITLAB_URL. Undefined: GITLAB_URL. */
  gitlabIssuer: variable(
    "GITLAB_ISSUER",
    undefined,
    urlWithoutTrailingSlash,
    "CI jobs: the `iss` of GitLab's ID tokens, where GitLab's public URL differs " +
      "([CI jobs](gateway.md#gitlab-ci-jobs))",
    "`GITLAB_URL` without a trailing slash",
  ),
} satisfies ConfigTable;

/** What MACHINE_VARIABLES reads to. */
export type MachineConfig = ValuesOf<typeof MACHINE_VARIABLES>;

/** The MCP servers a rule may name: `default` (at /mcp) and each of MCP_SERVERS_FILE's. */
export function configuredServers(
  config: { mcpServersFile?: { servers: readonly { name: string }[] } },
): string[] {
  return ["default", ...(config.mcpServersFile?.servers ?? []).map((server) => server.name)];
}

/** The issuer GitLab's ID tokens must name: GITLAB_ISSUER, else GITLAB_URL without a slash. */
export function gitlabIssuerOf(
  config: Pick<MachineConfig, "gitlabIssuer"> & { upstream: { url: URL } },
): string {
  return config.gitlabIssuer ?? config.upstream.url.href.replace(/\/+$/, "");
}

/**
 * Start-up stops (one line) when a rule names a server that is not configured, and when `ci:`
 * rules come without BASE_URL: an ID token's audience is checked against the issuer, which must
 * not follow the request's Host.
 */
export function requireMachineServers(
  config: MachineConfig & Parameters<typeof configuredServers>[0] & { baseUrl?: string },
): void {
  if (!config.machineAccessFile) return;
  if (config.machineAccessFile.ci.length > 0 && !config.baseUrl) {
    throw new ConfigError(
      "BASE_URL",
      "is required with MACHINE_ACCESS_FILE's ci: rules (GitLab ID tokens name it as their audience)",
    );
  }
  try {
    requireKnownServers(config.machineAccessFile, configuredServers(config));
  } catch (error) {
    if (!(error instanceof MachineAccessError)) throw error;
    throw new ConfigError(MACHINE_VARIABLES.machineAccessFile.name, error.message);
  }
}
