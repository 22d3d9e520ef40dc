/**
 * MCP_SERVERS_FILE: the MCP servers one service protects besides the one at `/mcp`, each behind
 * `/mcp/<name>` with its own audience. The file is YAML (`.yaml`, `.yml`) or JSON (`.json`), read
 * with a maintained parser; anything it does not understand (an unknown key at any level, a
 * repeated key, a field of the wrong kind) stops start-up with one line naming the file, the
 * entry (by name, or index) and the field, so a typo never widens or narrows access silently.
 *
 * @see docs/gateway.md "Several MCP servers"
 */

import { type PolicyFile, readPolicyFile } from "../access/call_policy_file.ts";
import { type AccessPolicy, parseAllowedGroups, parseAllowedUsers } from "../access/policy.ts";
import { PolicyError } from "../access/call_policy.ts";
import { ConfigError } from "../config/variable.ts";
import { readConfigurationFile } from "../config/bounded_read.ts";
import {
  type Fail,
  failingIn,
  isObject,
  onlyKeys,
  readTopObject,
} from "../config/structured_file.ts";
import { isWebUrl } from "../http/web_url.ts";

/** How the gateway hands an MCP server the user's GitLab token. */
export type TokenHeader = "authorization" | "private-token" | "none";

/** One MCP server of the file. */
export interface ServerEntry {
  /** `[a-z0-9][a-z0-9-]{0,31}`; served at `/mcp/<name>`. */
  name: string;
  url: URL;
  tokenHeader?: TokenHeader;
  timeoutMs?: number;
  /** `policy_file`, read with the servers file: decides the calls here instead of MCP_POLICY_FILE. */
  policy?: PolicyFile;
  /**
   * `allowed_gitlab_groups` and `allowed_gitlab_users`: who may get a token for this server,
   * besides what the service-wide lists require; undefined when the entry names neither.
   */
  lists?: AccessPolicy;
  /**
   * `gitlab_scopes`: what this server's sign-ins ask GitLab for, space-separated, instead of
   * GITLAB_SCOPES (of which they must be a part, checked with the configuration).
   */
  gitlabScopes?: string;
}

/** The servers file, read. */
export interface ServersFile {
  path: string;
  servers: ServerEntry[];
}

/** A server's name: what its path and its metrics label say. */
const NAME = /^[a-z0-9][a-z0-9-]{0,31}$/;
/** The name of the server at `/mcp` (MCP_UPSTREAM_URL), so no entry may take it. */
export const DEFAULT_SERVER = "default";
const ENTRY_KEYS = [
  "name",
  "url",
  "token_header",
  "timeout_ms",
  "policy_file",
  "allowed_gitlab_groups",
  "allowed_gitlab_users",
  "gitlab_scopes",
];
const TOKEN_HEADERS: readonly TokenHeader[] = ["authorization", "private-token", "none"];

/** The configuration's parser of MCP_SERVERS_FILE: the file read and checked once. */
export function parseServersFile(variable: string, path: string): ServersFile {
  return readServersFile(path, (problem) => new ConfigError(variable, problem));
}

/**
 * Reads and checks the servers file at `path`; `problem` makes the error its reader throws (one
 * line: the file, the entry, the field).
 */
export function readServersFile(
  path: string,
  problem: (message: string) => Error,
  readText: (path: string) => string = readConfigurationFile,
): ServersFile {
  const fail = failingIn(path, problem);
  const root = readTopObject(path, readText, fail, ["servers"], "a `servers` list");
  if (!Array.isArray(root.servers)) return fail("servers", "must be a list");
  const folder = new URL(".", new URL(path, `file://${Deno.cwd()}/`));
  const servers = root.servers.map((raw, index) => parseEntry(raw, index, fail, folder, readText));
  const seen = new Set<string>();
  for (const { name } of servers) {
    if (seen.has(name)) fail(`server ${JSON.stringify(name)}`, "the name is used twice");
    seen.add(name);
  }
  return { path, servers };
}

function parseEntry(
  raw: unknown,
  index: number,
  fail: Fail,
  folder: URL,
  readText: (path: string) => string,
): ServerEntry {
  let where = `server ${index}`;
  if (!isObject(raw)) return fail(where, "must be an object");
  if (typeof raw.name === "string" && NAME.test(raw.name)) where = `server ${raw.name}`;
  onlyKeys(raw, ENTRY_KEYS, where, fail);
  const name = raw.name;
  if (typeof name !== "string" || !NAME.test(name)) {
    return fail(`${where} name`, "must match [a-z0-9][a-z0-9-]{0,31}");
  }
  if (name === DEFAULT_SERVER) {
    return fail(`${where} name`, `"${DEFAULT_SERVER}" is the server at /mcp (MCP_UPSTREAM_URL)`);
  }
  const entry: ServerEntry = { name, url: serverUrl(raw.url, `${where} url`, fail) };
  if (raw.token_header !== undefined) {
    const header = String(raw.token_header).toLowerCase();
    if (typeof raw.token_header !== "string" || !TOKEN_HEADERS.includes(header as TokenHeader)) {
      fail(`${where} token_header`, `must be one of ${TOKEN_HEADERS.join(", ")}`);
    }
    entry.tokenHeader = header as TokenHeader;
  }
  if (raw.timeout_ms !== undefined) {
    const ms = raw.timeout_ms;
    if (typeof ms !== "number" || !Number.isInteger(ms) || ms < 1 || ms > 3_600_000) {
      fail(`${where} timeout_ms`, "must be a whole number of milliseconds, 1 to 3600000");
    }
    entry.timeoutMs = ms as number;
  }
  if (raw.policy_file !== undefined) {
    entry.policy = policyOf(raw.policy_file, folder, `${where} policy_file`, fail, readText);
  }
  if (raw.allowed_gitlab_groups !== undefined || raw.allowed_gitlab_users !== undefined) {
    entry.lists = {
      groups: listed(raw.allowed_gitlab_groups, `${where} allowed_gitlab_groups`, fail)(
        parseAllowedGroups,
      ),
      users: listed(raw.allowed_gitlab_users, `${where} allowed_gitlab_users`, fail)(
        parseAllowedUsers,
      ),
    };
  }
  if (raw.gitlab_scopes !== undefined) {
    const scopes = listed(raw.gitlab_scopes, `${where} gitlab_scopes`, fail)(scopeNames);
    entry.gitlabScopes = [...new Set(scopes)].join(" ");
  }
  return entry;
}

/**
 * A list field (absent: empty), each item read as the service-wide variable reads its entries;
 * a bad item fails naming the field.
 */
function listed(raw: unknown, where: string, fail: Fail) {
  if (
    raw !== undefined && (!Array.isArray(raw) || raw.length === 0 ||
      raw.some((item) => typeof item !== "string" || item.trim() === ""))
  ) {
    fail(where, "must be a non-empty list of non-empty strings (or be left out)");
  }
  const items = (raw ?? []) as string[];
  return <T>(parse: (name: string, raw: string) => T[]): T[] =>
    items.flatMap((item) => {
      try {
        return parse(where, item);
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        return fail(where, error.message.slice(where.length + 2));
      }
    });
}

/** One `gitlab_scopes` item: a scope's name, no spaces inside. */
function scopeNames(where: string, raw: string): string[] {
  if (/[\s,]/.test(raw.trim())) {
    throw new ConfigError(where, `${JSON.stringify(raw)} is not one scope (one name per item)`);
  }
  return [raw.trim()];
}

/** An entry's policy file, relative to the servers file's folder, read and checked now. */
function policyOf(
  raw: unknown,
  folder: URL,
  where: string,
  fail: Fail,
  readText: (path: string) => string,
): PolicyFile {
  if (typeof raw !== "string" || raw.trim() === "") return fail(where, "must be a file's path");
  const path = raw.startsWith("/") ? raw : decodeURIComponent(new URL(raw, folder).pathname);
  try {
    return readPolicyFile(path, readText);
  } catch (error) {
    if (!(error instanceof PolicyError)) throw error;
    return fail(where, error.message);
  }
}

function serverUrl(raw: unknown, where: string, fail: Fail): URL {
  const url = typeof raw === "string" ? URL.parse(raw) : null;
  if (!url || !isWebUrl(url)) return fail(where, "must be an http: or https: URL");
  if (url.username || url.password || url.hash) {
    return fail(where, "must carry no user name, password or fragment");
  }
  return url;
}
