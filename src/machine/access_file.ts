/**
 * MACHINE_ACCESS_FILE read and checked: YAML (`.yaml`, `.yml`) or JSON (`.json`) with a `ci:`
 * list (GitLab CI jobs, matched on their ID token's claims; each rule names its project by path
 * pattern, by id or by its namespace's id) and a `clients:` list
 * (operator-registered clients, by client_id). Anything it does not understand (an unknown or
 * repeated key, a value of the wrong kind, an unreadable `gitlab_token_file`) is refused with one
 * line naming the file, the rule and the field, so a typo never widens access silently.
 *
 * @see docs/gateway.md "Machine callers"
 */

import { dirname, isAbsolute, join } from "node:path";
import {
  type Fail,
  failingIn,
  isObject,
  onlyKeys,
  readTopObject,
} from "../config/structured_file.ts";
import { unreadableReason } from "../config/unreadable.ts";
import { READ_LIMITS, readConfigurationFile } from "../config/bounded_read.ts";
import { crossingGlob, projectGlob } from "./globs.ts";
import {
  type CiRule,
  type ClientRule,
  GitLabTokenSecret,
  type Glob,
  type MachineAccess,
  type MachineGrant,
} from "./rules.ts";

/** Thrown with the one line that says what is wrong with the file. */
export class MachineAccessError extends Error {
  override name = "MachineAccessError";
}

/** Reads files: the access file and its rules' token files (at most `limit` bytes, if given). */
export type ReadText = (path: string, limit?: number) => string;

const GRANT_KEYS = ["servers", "tools", "gitlab_token_file"];
const CI_KEYS = [
  "project",
  "project_id",
  "namespace_id",
  "ref",
  "ref_type",
  "ref_protected",
  "environment",
  ...GRANT_KEYS,
];
const CLIENT_KEYS = ["client_id", ...GRANT_KEYS];
/** A server name as MCP_SERVERS_FILE allows it, or `default`. */
const SERVER_NAME = /^[a-z0-9][a-z0-9-]{0,31}$/;
/** A pattern's characters: printable, no spaces. */
const PATTERN = /^[\x21-\x7e\u00a0-\uffff]+$/u;
const MAX_PATTERN = 500;
/** A GitLab id as its ID tokens write it (`"20"`): digits, no leading zero. */
const GITLAB_ID = /^[1-9][0-9]{0,19}$/;
/** The most characters a token file may hold: a GitLab token is far shorter. */
const MAX_TOKEN = 4096;

/** Reads and checks the access file at `path`; throws MachineAccessError. */
export function readMachineAccess(path: string, readText: ReadText = readConfigurationFile) {
  const fail = failingIn(path, (message) => new MachineAccessError(message));
  const root = readTopObject(path, readText, fail, ["ci", "clients"], "a `ci` or `clients` list");
  const context: Context = { fail, readText, folder: dirname(path), tokenFiles: [] };
  const ci = listOf(root.ci, "ci", fail).map((raw, index) => parseCiRule(raw, index, context));
  const clients = listOf(root.clients, "clients", fail)
    .map((raw, index) => parseClientRule(raw, index, context));
  const seen = new Set<string>();
  for (const rule of clients) {
    if (seen.has(rule.clientId)) fail(rule.where, `client_id ${rule.clientId} has two rules`);
    seen.add(rule.clientId);
  }
  return { path, ci, clients, tokenFiles: context.tokenFiles } satisfies MachineAccess;
}

interface Context {
  fail: Fail;
  readText: ReadText;
  /** The access file's folder: token files are relative to it. */
  folder: string;
  /** The token files read, in order. */
  tokenFiles: string[];
}

function parseCiRule(raw: unknown, index: number, context: Context): CiRule {
  const where = `ci rule ${index}`;
  const { fail } = context;
  if (!isObject(raw)) return fail(where, "must be an object");
  onlyKeys(raw, CI_KEYS, where, fail);
  if ([raw.project, raw.project_id, raw.namespace_id].every((key) => key === undefined)) {
    // A rule that names no project would admit every job that asks for our audience.
    fail(where, "must name its project: project, project_id or namespace_id");
  }
  const project = raw.project === undefined
    ? undefined
    : projectPattern(raw.project, `${where} project`, fail);
  const rule: CiRule = { ...parseGrant(raw, where, context), project };
  if (raw.project_id !== undefined) {
    rule.projectIds = gitlabIds(raw.project_id, `${where} project_id`, fail);
  }
  if (raw.namespace_id !== undefined) {
    rule.namespaceIds = gitlabIds(raw.namespace_id, `${where} namespace_id`, fail);
  }
  if (raw.ref !== undefined) rule.ref = crossing(raw.ref, `${where} ref`, fail);
  if (raw.ref_type !== undefined) {
    if (raw.ref_type !== "branch" && raw.ref_type !== "tag") {
      fail(`${where} ref_type`, "must be branch or tag");
    }
    rule.refType = raw.ref_type as "branch" | "tag";
  }
  if (raw.ref_protected !== undefined) {
    if (typeof raw.ref_protected !== "boolean") {
      fail(`${where} ref_protected`, "must be true or false");
    }
    rule.refProtected = raw.ref_protected as boolean;
  }
  if (raw.environment !== undefined) {
    rule.environment = crossing(raw.environment, `${where} environment`, fail);
  }
  return rule;
}

function parseClientRule(raw: unknown, index: number, context: Context): ClientRule {
  let where = `client rule ${index}`;
  const { fail } = context;
  if (!isObject(raw)) return fail(where, "must be an object");
  const clientId = raw.client_id;
  if (typeof clientId !== "string" || !PATTERN.test(clientId) || clientId.length > 255) {
    return fail(`${where} client_id`, "must be a client_id (printable, no spaces)");
  }
  where = `client rule ${index} (${clientId})`;
  onlyKeys(raw, CLIENT_KEYS, where, fail);
  return { ...parseGrant(raw, where, context), clientId };
}

function parseGrant(raw: Record<string, unknown>, where: string, context: Context): MachineGrant {
  const { fail } = context;
  const servers = listOf(raw.servers, `${where} servers`, fail);
  if (servers.length === 0) fail(`${where} servers`, "must name at least one MCP server");
  for (const server of servers) {
    if (typeof server !== "string" || !SERVER_NAME.test(server)) {
      fail(`${where} servers`, `${JSON.stringify(server)} is not a server name`);
    }
  }
  const grant: MachineGrant = { where, servers: [...new Set(servers as string[])] };
  if (raw.tools !== undefined) {
    const tools = listOf(raw.tools, `${where} tools`, fail);
    if (tools.length === 0) fail(`${where} tools`, "must name at least one tool pattern");
    grant.tools = tools.map((tool) => crossing(tool, `${where} tools`, fail));
  }
  if (raw.gitlab_token_file !== undefined) {
    grant.gitlabToken = readToken(raw.gitlab_token_file, `${where} gitlab_token_file`, context);
  }
  return grant;
}

/** The token in a rule's file (relative to the access file), trailing whitespace stripped. */
function readToken(raw: unknown, where: string, context: Context): GitLabTokenSecret {
  const { fail, readText, folder } = context;
  if (typeof raw !== "string" || raw === "") return fail(where, "must be a file name");
  const path = isAbsolute(raw) ? raw : join(folder, raw);
  context.tokenFiles.push(path);
  let text: string;
  try {
    text = readText(path, READ_LIMITS.secret);
  } catch (error) {
    return fail(where, `cannot read ${path} (${unreadableReason(error)})`);
  }
  const token = text.replace(/\s+$/u, "");
  if (token === "" || token.length > MAX_TOKEN || !/^[\x21-\x7e]+$/.test(token)) {
    return fail(where, `${path} must hold one token (printable, no spaces)`);
  }
  return new GitLabTokenSecret(token);
}

function projectPattern(raw: unknown, where: string, fail: Fail): Glob {
  const written = pattern(raw, where, fail);
  if (written.split("/")[0].includes("*")) {
    // On gitlab.com anyone can make a project whose job asks for our audience.
    fail(where, "must name its top-level group without a wildcard");
  }
  return { pattern: written, matcher: projectGlob(written) };
}

/** One GitLab id or a list of them, each digits (a number or a string); as GitLab writes them. */
function gitlabIds(raw: unknown, where: string, fail: Fail): string[] {
  const list = Array.isArray(raw) ? raw : [raw];
  if (list.length === 0) fail(where, "must name at least one id");
  const ids = list.map((id) => {
    const text = typeof id === "number" && Number.isSafeInteger(id) ? String(id) : id;
    if (typeof text !== "string" || !GITLAB_ID.test(text)) {
      const shown = (JSON.stringify(id) ?? String(id)).slice(0, 40);
      fail(where, `${shown} is not a GitLab id (digits, no leading zero; quote a very long one)`);
    }
    return text as string;
  });
  return [...new Set(ids)];
}

function pattern(raw: unknown, where: string, fail: Fail): string {
  if (typeof raw !== "string" || !PATTERN.test(raw) || raw.length > MAX_PATTERN) {
    return fail(where, `must be a pattern (printable, no spaces), not ${JSON.stringify(raw)}`);
  }
  return raw;
}

function crossing(raw: unknown, where: string, fail: Fail): Glob {
  const written = pattern(raw, where, fail);
  return { pattern: written, matcher: crossingGlob(written) };
}

function listOf(raw: unknown, where: string, fail: Fail): unknown[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) return fail(where, "must be a list");
  return raw;
}
