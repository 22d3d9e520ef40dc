/**
 * The MCP servers the gateway serves right now: MCP_UPSTREAM_URL's at `/mcp` (as `default`, for
 * the process's life) and MCP_SERVERS_FILE's at `/mcp/<name>`, which a reload of the file
 * replaces while the service runs (issue 35 §1). Every request reads the set once, by a map
 * lookup on its path; nothing else of the configuration is read per request. A server a reload
 * keeps unchanged stays the same object (its gateway, and what that gateway learnt, go on); a
 * changed one is a new object, so new requests take the new settings while the running ones
 * finish with the old.
 */

import { mcpResourceUrl, namedServerResource } from "../http/resource.ts";
import { DEFAULT_SERVER, type ServerEntry, type TokenHeader } from "./file.ts";

/**
 * What reaches a server: the set makes one per server, shares it with a changed server of the
 * same scheme and closes it when the server goes; how it sends is its user's business (the
 * gateway's MCP client).
 */
export interface ServerClient {
  /** Ends its connections, and the requests still waiting on them. */
  close(): void;
}

/** One MCP server behind the gateway: its name, where it is, how it is reached. */
export interface ServedServer<Client extends ServerClient = ServerClient> {
  /** `default` for the server at `/mcp`, else its MCP_SERVERS_FILE name (at `/mcp/<name>`). */
  name: string;
  url: URL;
  client: Client;
  tokenHeader: TokenHeader;
  timeoutMs: number;
  /** Its MCP_SERVERS_FILE entry; undefined for `/mcp`'s. */
  entry?: ServerEntry;
  /** Its resource URL for a base URL (remembered for the last base URL asked). */
  resourceFor(baseUrl: string): string;
}

/** What a replacement did: the names added, and the servers it removed or replaced. */
export interface ServersChange<Client extends ServerClient = ServerClient> {
  added: string[];
  /** No longer served: their streams end. */
  removed: ServedServer<Client>[];
  /** Served with new settings from now on: these are the old ones (sharing their client). */
  changed: ServedServer<Client>[];
}

/** The served set, its servers reached with `Client`s. */
export interface ServedSet<Client extends ServerClient = ServerClient> {
  /** The server serving `url` for a request to `baseUrl`, if any. */
  at(url: URL, baseUrl: string): ServedServer<Client> | undefined;
  /** The named server `name`, if served now. */
  named(name: string): ServedServer<Client> | undefined;
  /** The named servers' names, in the file's order. */
  names(): string[];
  /** Every protected resource a token may be asked for now: `/mcp`'s first (do not change it). */
  resources(baseUrl: string): readonly string[];
  /** Serves `entries` as the named servers from now on. */
  replace(entries: readonly ServerEntry[]): ServersChange<Client>;
  /** Ends the idle connections of every server's client (the service stops). */
  close(): void;
}

/** What the set is made from: the service-wide settings, `/mcp`'s client, a client maker. */
export interface ServedSetSettings<Client extends ServerClient> {
  config: {
    mcpResourceUrl?: string;
    mcpUpstreamUrl?: URL;
    mcpUpstreamTokenHeader: TokenHeader;
    mcpUpstreamTimeoutMs: number;
  };
  /** `/mcp`'s client; absent when MCP_UPSTREAM_URL is not set. */
  mcpClient?: Client;
  /** Makes the client of a named server. */
  clientFor(url: URL): Client;
}

/** The set serving `/mcp` (when configured) and `entries`. */
export function createServedSet<Client extends ServerClient>(
  settings: ServedSetSettings<Client>,
  entries: readonly ServerEntry[] = [],
): ServedSet<Client> {
  const { config } = settings;
  const main: ServedServer<Client> | undefined = config.mcpUpstreamUrl && settings.mcpClient
    ? {
      name: DEFAULT_SERVER,
      url: config.mcpUpstreamUrl,
      client: settings.mcpClient,
      tokenHeader: config.mcpUpstreamTokenHeader,
      timeoutMs: config.mcpUpstreamTimeoutMs,
      resourceFor: lastValueMemo((baseUrl) => mcpResourceUrl(config, baseUrl)),
    }
    : undefined;
  const serve = (
    entry: ServerEntry,
    client = settings.clientFor(entry.url),
  ): ServedServer<Client> => ({
    name: entry.name,
    url: entry.url,
    client,
    tokenHeader: entry.tokenHeader ?? config.mcpUpstreamTokenHeader,
    timeoutMs: entry.timeoutMs ?? config.mcpUpstreamTimeoutMs,
    entry,
    resourceFor: lastValueMemo((baseUrl) => namedServerResource(baseUrl, entry.name)),
  });
  let named = new Map(entries.map((entry) => [entry.name, serve(entry)]));
  // The resources of the last base URL asked, for the set they were made of.
  let listed: { baseUrl: string; of: typeof named; resources: string[] } | undefined;
  // The base URL is the same on every request with BASE_URL set, and nearly always without it.
  const mainPath = lastValueMemo((baseUrl) =>
    main ? trimPath(new URL(main.resourceFor(baseUrl)).pathname) : undefined
  );
  const namedPrefix = lastValueMemo((baseUrl) => new URL(`${baseUrl}/mcp/`).pathname);
  return {
    at(url, baseUrl) {
      const path = trimPath(url.pathname);
      if (path === mainPath(baseUrl)) return main;
      const prefix = namedPrefix(baseUrl);
      return path.startsWith(prefix) ? named.get(path.slice(prefix.length)) : undefined;
    },
    named: (name) => named.get(name),
    names: () => [...named.keys()],
    resources(baseUrl) {
      if (listed?.baseUrl !== baseUrl || listed.of !== named) {
        const resources = [
          mcpResourceUrl(config, baseUrl),
          ...[...named.keys()].map((name) => namedServerResource(baseUrl, name)),
        ];
        listed = { baseUrl, of: named, resources };
      }
      return listed.resources;
    },
    replace(next) {
      const change: ServersChange<Client> = { added: [], removed: [], changed: [] };
      const replacement = new Map<string, ServedServer<Client>>();
      for (const entry of next) {
        const old = named.get(entry.name);
        if (old?.entry && sameEntry(old.entry, entry)) {
          replacement.set(entry.name, old);
          continue;
        }
        if (old) change.changed.push(old);
        else change.added.push(entry.name);
        // A client is one connection pool for any URL of its scheme: a changed server keeps
        // its own, so its running requests and streams go on over their connections.
        const client = old?.url.protocol === entry.url.protocol ? old.client : undefined;
        replacement.set(entry.name, serve(entry, client));
      }
      for (const [name, old] of named) if (!replacement.has(name)) change.removed.push(old);
      named = replacement;
      return change;
    },
    close() {
      main?.client.close();
      for (const server of named.values()) server.client.close();
    },
  };
}

/** Whether two entries say the same (every field, whatever fields entries gain). */
function sameEntry(a: ServerEntry, b: ServerEntry): boolean {
  return JSON.stringify(a, comparable) === JSON.stringify(b, comparable);
}

/** What JSON.stringify would drop of a value (a Map's or a Set's contents), kept to compare. */
function comparable(_key: string, value: unknown): unknown {
  if (value instanceof Map) return { map: [...value] };
  if (value instanceof Set) return { set: [...value] };
  if (value instanceof RegExp) return { regexp: String(value) };
  return value;
}

/** `compute` remembering its last argument and result. */
function lastValueMemo<T>(compute: (key: string) => T): (key: string) => T {
  let last: { key: string; value: T } | undefined;
  return (key) => {
    if (last?.key !== key) last = { key, value: compute(key) };
    return last.value;
  };
}

function trimPath(pathname: string): string {
  return pathname.replace(/\/+$/, "") || "/";
}
