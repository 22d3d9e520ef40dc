/**
 * The configuration files the service follows while it runs: MCP_POLICY_FILE, MCP_SERVERS_FILE
 * (with its servers' policy files) and MACHINE_ACCESS_FILE (with its rules' token files) are
 * read again on SIGHUP and when their content changes on disk (config/file_watch.ts). Each
 * reload writes one line: what is in force now, or, for a file that start-up would refuse, why
 * nothing changed (what was in force stays; the service goes on).
 */

import type { Reload } from "../access/call_policy_file.ts";
import { FILE_CHECK_MS, UNSETTLED_READS, watchFile } from "../config/file_watch.ts";
import { requireDistinctServerPaths } from "../servers/config.ts";
import { DEFAULT_SERVER } from "../servers/file.ts";
import { reloadableServersFile, type ServersReload } from "../servers/reload.ts";
import type { Logger } from "../logger.ts";
import type { MachineReload } from "../machine/holder.ts";
import type { AppDeps } from "./context.ts";
import { requireServerScopes } from "./server_scopes_config.ts";
import { requireServerRoles } from "./roles_config.ts";

/** The running watches; `reload` is what SIGHUP does. */
export interface FollowedFiles {
  /** Reads every followed file again now, whatever it holds (SIGHUP). */
  reload(): void;
  /** Reads every followed file now, and reloads the ones that changed (what the timer does). */
  check(): Promise<void>;
  stop(): void;
}

/**
 * How the files are followed: the poll interval (none: only `check` reads them), and how a
 * file is read (tests put theirs in).
 */
export interface FollowOptions {
  everyMs?: number;
  readText?: (path: string) => Promise<string>;
}

/** Whether any file is there to follow (without one, SIGHUP keeps its default meaning). */
export function hasFollowedFiles(deps: Pick<AppDeps, "config">): boolean {
  const { config } = deps;
  return config.mcpPolicyFile !== undefined || config.mcpServersFile !== undefined ||
    config.machineAccessFile !== undefined;
}

/** Follows the policy, servers and machine access files of `deps`, logging each reload on `logger`. */
export function followConfigFiles(
  deps: Pick<AppDeps, "config" | "callPolicy" | "servers" | "openStreams" | "machineAccess">,
  logger: Logger,
  options: FollowOptions = { everyMs: FILE_CHECK_MS },
): FollowedFiles {
  const servers = reloadableServersFile({
    servers: deps.servers,
    openStreams: deps.openStreams,
    path: deps.config.mcpServersFile?.path,
    // A server's own policy is refused on reload for what refuses MCP_POLICY_FILE's.
    check: (file) => {
      requireServerRoles(file, deps.callPolicy.rules.roles);
      requireServerScopes(deps.config, file);
      requireDistinctServerPaths(deps.config, file);
      for (const entry of file.servers) {
        if (entry.policy) deps.callPolicy.check(entry.policy.policy);
      }
    },
  });
  const policy = watchFile(deps.callPolicy, (reload) => logPolicyReload(reload, logger), {
    ...options,
    onUnsettled: () => logUnsettled("MCP_POLICY_FILE", logger),
  });
  // A change to a file they name (as in force) reloads them too.
  const served = watchFile(servers, (reload) => afterServersReload(reload, deps, logger), {
    ...options,
    namedFiles: () => serversPolicyFiles(deps.servers),
    onUnsettled: () => logUnsettled("MCP_SERVERS_FILE", logger),
  });
  const machine = watchFile(deps.machineAccess, (reload) => logMachineReload(reload, logger), {
    ...options,
    namedFiles: () => deps.machineAccess.current()?.tokenFiles ?? [],
    onUnsettled: () => logUnsettled("MACHINE_ACCESS_FILE", logger),
  });
  const watches = [policy, served, machine];
  return {
    reload() {
      logPolicyReload(policy.reload(), logger);
      afterServersReload(served.reload(), deps, logger);
      logMachineReload(machine.reload(), logger);
    },
    async check() {
      await Promise.all(watches.map((watch) => watch.check()));
    },
    stop: () => watches.forEach((watch) => watch.stop()),
  };
}

/** The policy files the servers in force name (`policy_file`). */
function serversPolicyFiles(servers: AppDeps["servers"]): string[] {
  return servers.names().flatMap((name) => servers.named(name)?.entry?.policy?.path ?? []);
}

/** A followed file that changed at every read: not applied, which would otherwise go unsaid. */
function logUnsettled(variable: string, logger: Logger): void {
  logger.warn(
    `${variable} not reloaded: it (or a file it names) changed at each of the last ` +
      `${UNSETTLED_READS} reads; it is applied once a read a second later finds it unchanged, ` +
      "and what is in force stays until then",
  );
}

function logPolicyReload(reload: Reload, logger: Logger): void {
  if (reload.kind === "reloaded") {
    logger.info("MCP_POLICY_FILE reloaded", { file: reload.path, rules: reload.rules });
  } else if (reload.kind === "kept") {
    logger.error(`MCP_POLICY_FILE not reloaded, the policy in force stays: ${reload.problem}`);
  }
}

function logMachineReload(reload: MachineReload, logger: Logger): void {
  if (reload.kind === "reloaded") {
    logger.info("MACHINE_ACCESS_FILE reloaded", {
      file: reload.path,
      ciRules: reload.ci,
      clientRules: reload.clients,
    });
  } else if (reload.kind === "kept") {
    logger.error(`MACHINE_ACCESS_FILE not reloaded, the rules in force stay: ${reload.problem}`);
  }
}

/** A servers file reloaded names other groups to learn: the access rules are worked out again. */
function afterServersReload(
  reload: ServersReload,
  deps: Pick<AppDeps, "config" | "callPolicy">,
  logger: Logger,
): void {
  if (reload.kind === "reloaded") deps.callPolicy.regroup();
  logServersReload(reload, deps, logger);
}

function logServersReload(
  reload: ServersReload,
  deps: Pick<AppDeps, "config">,
  logger: Logger,
): void {
  if (reload.kind === "reloaded") {
    // The same list as the start-up line's, so one reader follows both.
    const main = deps.config.mcpUpstreamUrl ? [DEFAULT_SERVER] : [];
    logger.info("MCP_SERVERS_FILE reloaded", {
      file: reload.path,
      mcpServers: [...main, ...reload.servers].join(","),
      added: reload.added.join(",") || undefined,
      removed: reload.removed.join(",") || undefined,
      changed: reload.changed.join(",") || undefined,
    });
  } else if (reload.kind === "kept") {
    logger.error(`MCP_SERVERS_FILE not reloaded, the servers in force stay: ${reload.problem}`);
  }
}
