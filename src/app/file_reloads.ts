/**
 * The configuration files the service follows while it runs: MCP_POLICY_FILE and
 * MCP_SERVERS_FILE are read again on SIGHUP and when their content changes on disk
 * (config/file_watch.ts); MACHINE_ACCESS_FILE (with its rules' token files) on SIGHUP. Each reload writes one line: what is in force now, or, for a file that
 * start-up would refuse, why nothing changed (what was in force stays; the service goes on).
 */

import type { Reload } from "../access/call_policy_file.ts";
import { FILE_CHECK_MS, watchFile } from "../config/file_watch.ts";
import { DEFAULT_SERVER } from "../gateway/servers_file.ts";
import { reloadableServersFile, type ServersReload } from "../gateway/servers_reload.ts";
import type { Logger } from "../logger.ts";
import type { MachineReload } from "../machine/holder.ts";
import type { AppDeps } from "./context.ts";
import { requireServerScopes } from "./server_scopes_config.ts";

/** The running watches; `reload` is what SIGHUP does. */
export interface FollowedFiles {
  /** Reads every followed file again now, whatever it holds (SIGHUP). */
  reload(): void;
  /** Reads every followed file now, and reloads the ones that changed (what the timer does). */
  check(): void;
  stop(): void;
}

/** How the files are followed: the poll interval (none: only `check` reads them), the reader. */
export interface FollowOptions {
  everyMs?: number;
  readText?: (path: string) => string;
}

/** Whether any file is there to follow (without one, SIGHUP keeps its default meaning). */
export function hasFollowedFiles(deps: Pick<AppDeps, "config">): boolean {
  const { config } = deps;
  return config.mcpPolicyFile !== undefined || config.mcpServersFile !== undefined ||
    config.machineAccessFile !== undefined;
}

/**
 * Follows the policy and servers files of `deps` (and, on SIGHUP, its machine access file),
 * logging each reload on `logger`.
 */
export function followConfigFiles(
  deps: Pick<AppDeps, "config" | "callPolicy" | "servers" | "openStreams" | "machineAccess">,
  logger: Logger,
  options: FollowOptions = { everyMs: FILE_CHECK_MS },
): FollowedFiles {
  const servers = reloadableServersFile({
    servers: deps.servers,
    openStreams: deps.openStreams,
    path: deps.config.mcpServersFile?.path,
    readText: options.readText,
    // A server's own policy is refused on reload for what refuses MCP_POLICY_FILE's.
    check: (file) => {
      requireServerScopes(deps.config, file);
      for (const entry of file.servers) {
        if (entry.policy) deps.callPolicy.check(entry.policy.policy);
      }
    },
  });
  const policy = watchFile(deps.callPolicy, (reload) => logPolicyReload(reload, logger), options);
  const served = watchFile(servers, (reload) => afterServersReload(reload, deps, logger), {
    ...options,
    readText: withServersPolicies(deps.servers, options.readText ?? Deno.readTextFileSync),
  });
  const watches = [policy, served];
  return {
    reload() {
      logPolicyReload(policy.reload(), logger);
      afterServersReload(served.reload(), deps, logger);
      logMachineReload(deps.machineAccess.reload(), logger);
    },
    check: () => watches.forEach((watch) => watch.check()),
    stop: () => watches.forEach((watch) => watch.stop()),
  };
}

/**
 * The servers file's text followed by the text of the policy files its servers name: a changed
 * `policy_file` reloads the servers file (which reads its policies again), as a changed servers
 * file does.
 */
function withServersPolicies(
  servers: AppDeps["servers"],
  readText: (path: string) => string,
): (path: string) => string {
  return (path) => {
    const policyPaths = servers.names()
      .flatMap((name) => servers.named(name)?.entry?.policy?.path ?? []);
    const policies = policyPaths.map((policyPath) => {
      try {
        return readText(policyPath);
      } catch {
        return "";
      }
    });
    return [readText(path), ...policies].join("\0");
  };
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
