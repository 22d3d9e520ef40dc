/**
 * `deno task sim-gitlab`: the simulated GitLab on its own, for trying the real service's
 * production setup (strict profile, PostgreSQL, group allow-lists, a policy file) without a
 * GitLab instance. Users, groups with roles and memberships come from flags or a small JSON
 * file; its pages sign in as the account `--approve-as` names and offer Authorize and Deny.
 *
 *   deno task sim-gitlab [--port 9000] [--user name:id]... [--member group:name:role]...
 *                        [--approve-as name] [--file sim-gitlab.json]
 *
 * The file holds the same settings: `{"port": 9000, "users": ["ada:4242"], "members":
 * ["acme:ada:developer"], "approve_as": "ada"}`; flags add to it (port and approve-as replace).
 *
 * Development only: state lives in memory and dies with the process.
 */

import { parseArgs } from "node:util";
import { GITLAB_ROLES } from "../src/upstream/gitlab.ts";
import {
  type SimulatedMembership,
  type SimulatedUser,
  startSimulatedGitLab,
} from "./simulated_gitlab.ts";

/** What the simulation starts with. */
export interface SimGitLabSettings {
  port: number;
  users: SimulatedUser[];
  memberships: SimulatedMembership[];
  /** The account that signs in on the pages: `users[0]`'s username. */
  approveAs: string;
}

/** A flag or file value the simulation cannot use; the message names it. */
export class SimGitLabUsageError extends Error {}

const DEFAULT_PORT = 9000;
const DEFAULT_USER = "ada:4242";
const USAGE = "usage: deno task sim-gitlab [--port 9000] [--user name:id]... " +
  "[--member group:name:role]... [--approve-as name] [--file settings.json]";

/** The settings `args` (and the file `--file` names) describe. */
export async function simGitLabSettings(args: string[]): Promise<SimGitLabSettings> {
  let flags;
  try {
    flags = parseArgs({
      args,
      options: {
        port: { type: "string" },
        user: { type: "string", multiple: true },
        member: { type: "string", multiple: true },
        "approve-as": { type: "string" },
        file: { type: "string" },
      },
    }).values;
  } catch (error) {
    throw new SimGitLabUsageError((error as Error).message);
  }
  const file = flags.file === undefined ? {} : await readSettingsFile(flags.file);
  const userSpecs = [...file.users ?? [], ...flags.user ?? []];
  const users = (userSpecs.length > 0 ? userSpecs : [DEFAULT_USER]).map(parseUser);
  assertUnique(users.map((user) => user.username.toLowerCase()), "username");
  assertUnique(users.map((user) => String(user.id)), "user id");
  const memberships = [...file.members ?? [], ...flags.member ?? []].map((spec) =>
    parseMember(spec, users)
  );
  const approveAs = flags["approve-as"] ?? file.approve_as ?? users[0].username;
  const approver = findUser(users, approveAs, "--approve-as");
  return {
    port: parsePort(flags.port ?? (file.port === undefined ? undefined : String(file.port))),
    // The simulation signs in as its first account.
    users: [approver, ...users.filter((user) => user !== approver)],
    memberships,
    approveAs: approver.username,
  };
}

interface SettingsFile {
  port?: number;
  users?: string[];
  members?: string[];
  approve_as?: string;
}

async function readSettingsFile(path: string): Promise<SettingsFile> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await Deno.readTextFile(path));
  } catch (error) {
    throw new SimGitLabUsageError(`--file ${path}: ${(error as Error).message}`);
  }
  const file = parsed as SettingsFile;
  const strings = (value: unknown) =>
    value === undefined || (Array.isArray(value) && value.every((v) => typeof v === "string"));
  const known = ["port", "users", "members", "approve_as"];
  const unknown = typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
    ? Object.keys(parsed).filter((key) => !known.includes(key))
    : ["(not an object)"];
  if (
    unknown.length > 0 || !strings(file.users) || !strings(file.members) ||
    !(file.approve_as === undefined || typeof file.approve_as === "string") ||
    !(file.port === undefined || typeof file.port === "number")
  ) {
    throw new SimGitLabUsageError(
      `--file ${path}: expected {"port": number, "users": ["name:id"], "members": ` +
        `["group:name:role"], "approve_as": "name"}${
          unknown.length > 0 ? `; unknown: ${unknown.join(", ")}` : ""
        }`,
    );
  }
  return file;
}

function parsePort(text: string | undefined): number {
  if (text === undefined) return DEFAULT_PORT;
  const port = Number(text);
  if (!/^\d+$/.test(text) || port > 65535) {
    throw new SimGitLabUsageError(`--port: a port number (0 picks a free one), got "${text}"`);
  }
  return port;
}

/** `name:id`, e.g. `ada:4242`. */
function parseUser(spec: string): SimulatedUser {
  const match = /^([A-Za-z0-9_][A-Za-z0-9_.-]*):([1-9]\d{0,15})$/.exec(spec);
  if (!match) {
    throw new SimGitLabUsageError(`--user: name:id (e.g. ada:4242), got "${spec}"`);
  }
  return { username: match[1], id: Number(match[2]), name: match[1] };
}

/** `group:name:role`, e.g. `acme/platform:ada:maintainer`; the role is a name or a level. */
function parseMember(spec: string, users: SimulatedUser[]): SimulatedMembership {
  const parts = spec.split(":");
  if (parts.length !== 3 || parts.some((part) => part === "")) {
    throw new SimGitLabUsageError(
      `--member: group:name:role (e.g. acme/platform:ada:developer), got "${spec}"`,
    );
  }
  const [group, username, role] = parts;
  const roles: Record<string, number> = GITLAB_ROLES;
  const accessLevel = Object.hasOwn(roles, role)
    ? roles[role]
    : Object.values(roles).includes(Number(role))
    ? Number(role)
    : undefined;
  if (accessLevel === undefined) {
    throw new SimGitLabUsageError(
      `--member ${spec}: role is one of ${Object.keys(roles).join(", ")} (or its level)`,
    );
  }
  return { group, userId: findUser(users, username, `--member ${spec}`).id, accessLevel };
}

function findUser(users: SimulatedUser[], username: string, where: string): SimulatedUser {
  const user = users.find((candidate) =>
    candidate.username.toLowerCase() === username.toLowerCase()
  );
  if (!user) {
    throw new SimGitLabUsageError(
      `${where}: no user "${username}" (users: ${users.map((u) => u.username).join(", ")})`,
    );
  }
  return user;
}

function assertUnique(values: string[], what: string): void {
  const repeated = values.find((value, i) => values.indexOf(value) !== i);
  if (repeated !== undefined) throw new SimGitLabUsageError(`--user: ${what} ${repeated} twice`);
}

/** What the operator reads at start: where it listens, who is who, what to set. */
function banner(url: URL, settings: SimGitLabSettings): string {
  const levelName = (level: number) =>
    Object.entries(GITLAB_ROLES).find(([, value]) => value === level)?.[0] ?? String(level);
  const nameOf = (id: number) => settings.users.find((user) => user.id === id)?.username;
  return [
    "",
    `  Simulated GitLab on ${url.origin} (development only: state lives in memory).`,
    `  Users: ${settings.users.map((user) => `${user.username} (id ${user.id})`).join(", ")}`,
    ...(settings.memberships.length === 0 ? ["  Groups: none"] : [
      "  Groups:",
      ...settings.memberships.map(({ group, userId, accessLevel }) =>
        `    ${group}: ${nameOf(userId)} as ${levelName(accessLevel)}`
      ),
    ]),
    `  Its pages sign in as ${settings.approveAs}: click Authorize (or Deny).`,
    "",
    "  Point the service at it (any client id and secret are accepted):",
    `    GITLAB_URL=${url.origin} GITLAB_CLIENT_ID=sim-app`,
    "  Ctrl-C stops it.",
    "",
  ].join("\n");
}

async function main(): Promise<void> {
  let settings: SimGitLabSettings;
  try {
    settings = await simGitLabSettings(Deno.args);
  } catch (error) {
    if (!(error instanceof SimGitLabUsageError)) throw error;
    await Deno.stderr.write(new TextEncoder().encode(`sim-gitlab: ${error.message}\n${USAGE}\n`));
    Deno.exit(2);
  }
  let gitlab;
  try {
    gitlab = startSimulatedGitLab({
      port: settings.port,
      users: settings.users,
      memberships: settings.memberships,
    });
  } catch (error) {
    if (!(error instanceof Deno.errors.AddrInUse)) throw error;
    await Deno.stderr.write(new TextEncoder().encode(
      `sim-gitlab: port ${settings.port} is in use (--port chooses another)\n`,
    ));
    Deno.exit(1);
  }
  await Deno.stdout.write(new TextEncoder().encode(banner(gitlab.url, settings) + "\n"));
  const stop = async () => {
    await gitlab.close();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
}

if (import.meta.main) await main();
