/**
 * The machine access rules in force: read at start-up (a problem stops it with one line), and
 * again on SIGHUP or a change on disk (app/file_reloads.ts), when a file that cannot be used (or names a server that is not configured)
 * keeps the rules in force as they were. The grants read the holder when they issue, and the
 * gateway on every call, so a narrowed rule bites at the next call.
 */

import { MachineAccessError, readMachineAccess, type ReadText } from "./access_file.ts";
import type { MachineAccess } from "./rules.ts";

/** The outcome of a reload. */
export type MachineReload =
  | { kind: "reloaded"; path: string; ci: number; clients: number }
  | { kind: "kept"; path: string; problem: string }
  | { kind: "none" };

/** The rules in force, replaced only by a reload that succeeds. */
export interface MachineAccessHolder {
  /** The rules in force; undefined: no MACHINE_ACCESS_FILE, no machine caller is admitted. */
  current(): MachineAccess | undefined;
  /** MACHINE_ACCESS_FILE's path; undefined when it is unset. */
  path(): string | undefined;
  /**
   * Reads the file (and its token files) again, through `readText` when given (the texts a watch
   * saw hold still).
   */
  reload(readText?: ReadText): MachineReload;
}

/** Refuses rules naming a server not in `known` (`default` is the one at /mcp). */
export function requireKnownServers(access: MachineAccess, known: readonly string[]): void {
  for (const rule of [...access.ci, ...access.clients]) {
    const unknown = rule.servers.find((server) => !known.includes(server));
    if (unknown !== undefined) {
      throw new MachineAccessError(
        `${access.path}: ${rule.where} servers: ${unknown} is not a configured MCP server ` +
          `(configured: ${known.join(", ")})`,
      );
    }
  }
}

/**
 * Refuses `ci:` rules without BASE_URL, as start-up does (config.ts): an ID token's audience is
 * checked against the issuer, which would otherwise follow the request's `Host`.
 */
export function requireBaseUrlForCi(access: MachineAccess, baseUrl: string | undefined): void {
  if (access.ci.length > 0 && !baseUrl) {
    throw new MachineAccessError(
      `${access.path}: ci: rules need BASE_URL (GitLab ID tokens name it as their audience)`,
    );
  }
}

/** What a reload is checked against besides the file itself. */
export interface MachineReloadChecks {
  /** BASE_URL, which `ci:` rules need. */
  baseUrl?: string;
  readText?: ReadText;
}

/**
 * A holder starting with `initial`, whose reloads must name only the servers served then, and
 * may bring `ci:` rules only with BASE_URL.
 */
export function createMachineAccessHolder(
  initial: MachineAccess | undefined,
  knownServers: () => readonly string[],
  { baseUrl, readText }: MachineReloadChecks = {},
): MachineAccessHolder {
  let inForce = initial;
  return {
    current: () => inForce,
    path: () => inForce?.path,
    reload(settled) {
      if (inForce === undefined) return { kind: "none" };
      const { path } = inForce;
      try {
        const next = readMachineAccess(path, settled ?? readText);
        requireKnownServers(next, knownServers());
        requireBaseUrlForCi(next, baseUrl);
        inForce = next;
        return { kind: "reloaded", path, ci: next.ci.length, clients: next.clients.length };
      } catch (error) {
        if (!(error instanceof MachineAccessError)) throw error;
        return { kind: "kept", path, problem: error.message };
      }
    },
  };
}
