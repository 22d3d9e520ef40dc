/**
 * MCP_SERVERS_FILE read again while the service runs (on SIGHUP, and when its content changes on
 * disk: main.ts): a file start-up would refuse changes nothing (the servers in force stay, the
 * reload says why); a good one replaces the named servers at once. A removed server answers 404
 * from then on, its open event streams end now and its requests still waiting for an answer end
 * too (its client is closed: mcp_client/); a changed one serves new requests with its
 * new settings while its running requests and streams go on; `/mcp`'s never changes.
 */

import { ConfigError } from "../config/variable.ts";
import type { ServedSet } from "./served_set.ts";
import { readServersFile, type ServersFile } from "./file.ts";

/** The variable the file comes from, for the error line. */
const VARIABLE = "MCP_SERVERS_FILE";

/** The outcome of a reload. */
export type ServersReload =
  | {
    kind: "reloaded";
    path: string;
    /** The named servers served now, in the file's order. */
    servers: string[];
    added: string[];
    removed: string[];
    changed: string[];
  }
  | { kind: "kept"; path: string; problem: string }
  | { kind: "none" };

/** What a reload works on. */
export interface ServersReloadDeps {
  servers: ServedSet;
  /** The gateway's open event streams: a removed server's end. */
  openStreams: { endServer(name: string): void };
  /** MCP_SERVERS_FILE's path; undefined when it is unset (nothing to reload). */
  path: string | undefined;
  /**
   * What start-up checks beyond the file itself (it throws ConfigError), so that a reload
   * refuses exactly what start-up refuses.
   */
  check?: (file: ServersFile) => void;
  readText?: (path: string) => string;
}

/**
 * The servers file as a reloadable file (see config/file_watch.ts): `readText`, when given,
 * answers for the files as the watch saw them hold still.
 */
export function reloadableServersFile(deps: ServersReloadDeps) {
  return {
    path: () => deps.path,
    reload: (readText?: (path: string) => string) =>
      reloadServers(readText ? { ...deps, readText } : deps),
  };
}

/** Reads the file again and serves what it lists, or keeps the servers in force. */
export function reloadServers(deps: ServersReloadDeps): ServersReload {
  const { path } = deps;
  if (path === undefined) return { kind: "none" };
  let file: ServersFile;
  try {
    file = readServersFile(path, (problem) => new ConfigError(VARIABLE, problem), deps.readText);
    deps.check?.(file);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const problem = error.message.startsWith(`${VARIABLE}: `)
      ? error.message.slice(VARIABLE.length + 2)
      : error.message;
    return { kind: "kept", path, problem };
  }
  const change = deps.servers.replace(file.servers);
  for (const server of change.removed) {
    deps.openStreams.endServer(server.name);
    // Its requests still waiting for an answer end too: nothing of it is served any more.
    server.client.close();
  }
  return {
    kind: "reloaded",
    path,
    servers: deps.servers.names(),
    added: change.added,
    removed: change.removed.map(({ name }) => name),
    changed: change.changed.map(({ name }) => name),
  };
}
