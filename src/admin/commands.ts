/**
 * What each operator command does, over the service's own store and upstream client. Lists
 * print a table (or JSON lines with `--json`) and never a token; every change is logged as one
 * JSON line naming the operator action.
 */

import type { Logger } from "../logger.ts";
import type { Store } from "../store/mod.ts";
import type { ClientRecord, SessionRecord } from "../store/records.ts";
import type { ProviderRoles, Upstream } from "../upstream/types.ts";
import { admissionLabel, admissionOf, admittedThrough } from "./admission.ts";
import type { AdminCommand, UserSelector } from "./args.ts";
import { endSessions, openAll, type Revoker } from "./ending.ts";
import { formatTable } from "./table.ts";
import { addMachineClient, deleteMachineClient, printMachineClients } from "./machine_clients.ts";
import { AdminRefusal } from "./refusal.ts";
import { printStats } from "./stats.ts";

export { AdminRefusal } from "./refusal.ts";
import { jsonLine } from "./terminal.ts";

/** What the commands run against. */
export interface AdminDeps {
  store: Store;
  /** GitLab, to revoke tokens; absent without GITLAB_CLIENT_ID. */
  upstream?: Upstream;
  /**
   * The settings revoking GitLab tokens needs that this environment lacks (e.g.
   * `ENCRYPTION_KEY or JWT_SECRET`); a command that ends sessions refuses while any is missing.
   */
  missingForRevocation?: string[];
  logger: Logger;
  /** Prints one line of the command's output. */
  print(line: string): void;
  /** Prints a note for the operator beside the output (stderr), not part of it. */
  note?(line: string): void;
  /** The KV file's size in bytes (with its WAL), or undefined when KV is no local file. */
  kvFileSize(): Promise<number | undefined>;
  /** Which store this is, as the start-up line names it (`kv:<path>`, `postgres:<host>/<db>`). */
  storeName?: string;
  /** The MCP servers the gateway serves: `default` (/mcp) and MCP_SERVERS_FILE's names. */
  servers?: readonly string[];
  /** The provider's roles, to name the levels that admitted a session (absent: numbers). */
  roles?: ProviderRoles;
  /** BASE_URL; `clients add --jwks-file` refuses without it, as the service refuses the keys. */
  baseUrl?: string;
}

/** The commands that read or change KV (`keys generate`, `migrate` and `help` need none). */
export type StoreCommand = Exclude<
  AdminCommand,
  { name: "keys generate" | "migrate" | "help" | "config check" }
>;

/** Exit code of `sessions revoke --user` when the user has no session: nothing was ended. */
export const NOTHING_MATCHED = 3;

/**
 * Runs one command; answers the process's exit code (1: what it names does not exist;
 * NOTHING_MATCHED: a user with no session to end).
 */
export async function runStoreCommand(command: StoreCommand, deps: AdminDeps): Promise<number> {
  switch (command.name) {
    case "sessions list": {
      const { who, group, server } = command;
      const servers = deps.servers ?? ["default"];
      if (server !== undefined && !servers.includes(server)) {
        throw new AdminRefusal(
          `no MCP server named ${JSON.stringify(server)} (served: ${servers.join(", ")})`,
          2,
        );
      }
      const sessions = (await deps.store.listSessions(who)).map((read) => read.value);
      const listed = sessions.filter((session) =>
        (group === undefined || admittedThrough(session, group)) &&
        (server === undefined || serverOf(session, servers) === server)
      );
      printSessions(listed, command.json, deps);
      return 0;
    }
    case "sessions revoke":
      return "id" in command.by
        ? await revokeSession(command.by.id, command.keepGitLabTokens, deps)
        : await revokeUserSessions(command.by, command.keepGitLabTokens, deps);
    case "clients list":
      printClients(await deps.store.listClients(), command.json, deps);
      printMachineClients(await deps.store.listMachineClients(), command.json, deps);
      return 0;
    case "clients add":
      return await addMachineClient(command, deps);
    case "clients delete":
      // A machine client has no session and no GitLab token: it needs no GitLab settings.
      if (await deleteMachineClient(command.clientId, deps)) return 0;
      return await deleteClient(command.clientId, command.keepGitLabTokens, deps);
    case "stats":
      await printStats(command.json, deps);
      return 0;
  }
}

/**
 * The MCP server a session's tokens are for: the named server its resource's path ends with
 * (`/mcp/<name>`), else `default` (/mcp, and sessions from before resource indicators).
 */
function serverOf(session: SessionRecord, servers: readonly string[]): string {
  const path = session.resource === undefined ? "" : URL.parse(session.resource)?.pathname ?? "";
  const name = /\/mcp\/([a-z0-9][a-z0-9-]*)\/?$/.exec(path)?.[1];
  return name !== undefined && servers.includes(name) ? name : "default";
}

/** One line a session: never its refresh token's hash nor its sealed upstream tokens. */
function sessionView(session: SessionRecord, roles: ProviderRoles | undefined) {
  return {
    id: session.id,
    userId: session.upstreamUserId,
    username: session.upstreamUsername,
    clientId: session.clientId,
    admittedBy: admissionOf(session, roles),
    scopes: session.scopes.join(" "),
    createdAt: iso(session.createdAt),
    lastRefreshedAt: iso(session.updatedAt),
    expiresAt: iso(session.expiresAt),
  };
}

function printSessions(sessions: SessionRecord[], json: boolean, deps: AdminDeps): void {
  const views = sessions.map((session) => sessionView(session, deps.roles));
  if (json) return views.forEach((view) => deps.print(jsonLine(view)));
  const rows = views.map((v) => [
    v.id,
    `${v.username} (${v.userId})`,
    v.clientId,
    admissionLabel(v.admittedBy),
    v.createdAt,
    v.lastRefreshedAt,
    v.expiresAt,
  ]);
  formatTable(
    ["SESSION", "USER", "CLIENT", "ADMITTED BY", "CREATED", "LAST REFRESH", "EXPIRES"],
    rows,
  )
    .forEach((line) => deps.print(line));
  deps.print(`${sessions.length} session(s)`);
}

function printClients(clients: ClientRecord[], json: boolean, deps: AdminDeps): void {
  const views = clients.map((client) => ({
    clientId: client.clientId,
    name: client.clientName ?? "",
    issuedAt: iso(client.clientIdIssuedAt * 1000),
    redirectUris: client.redirectUris,
  }));
  if (json) return views.forEach((view) => deps.print(jsonLine(view)));
  const rows = views.map((v) => [v.clientId, v.name, v.issuedAt, v.redirectUris.join(" ")]);
  formatTable(["CLIENT", "NAME", "REGISTERED", "REDIRECT URIS"], rows)
    .forEach((line) => deps.print(line));
  deps.print(`${clients.length} client(s)`);
}

/** Offboarding: every session of the user ends, and their GitLab tokens are revoked. */
async function revokeUserSessions(
  who: UserSelector,
  keepGitLabTokens: boolean,
  deps: AdminDeps,
): Promise<number> {
  const revoker = gitLabRevoker(keepGitLabTokens, deps);
  const sessions = await deps.store.listSessions(who);
  if (sessions.length === 0) {
    deps.logger.warn("no session of that user: nothing ended", {
      action: "sessions revoke",
      ...who,
    });
    return NOTHING_MATCHED;
  }
  const records = sessions.map((read) => read.value);
  const matched = howMatched(who, records);
  const ending = await openAll(sessions, revoker, deps);
  const users = [...new Set(records.map(userLabel))].join(", ");
  await endSessions(ending, revoker, { action: "sessions revoke", ...who, matched, users }, deps);
  return 0;
}

function userLabel(session: SessionRecord): string {
  return `${session.upstreamUsername} (${session.upstreamUserId})`;
}

/**
 * What `who` matched: "user id", "username", or both for one user whose username is their id.
 * A `--user` that is one user's id and another's username is refused: the operator says which.
 */
function howMatched(who: UserSelector, sessions: SessionRecord[]): string {
  if ("userId" in who) return "user id";
  if ("username" in who) return "username";
  const byId = sessions.filter((session) => session.upstreamUserId === who.user.trim());
  const byName = sessions.filter((session) => !byId.includes(session));
  if (byId.length === 0) return "username";
  if (byName.length === 0) {
    const name = byId.some((s) => s.upstreamUsername.toLowerCase() === who.user.trim());
    return name ? "user id and username" : "user id";
  }
  throw new AdminRefusal(
    `--user ${who.user} matches the user id of ${userLabel(byId[0])} and the username of ` +
      `${userLabel(byName[0])}; nothing was ended. Say which: --user-id ${who.user} or ` +
      `--username ${who.user}.`,
    2,
  );
}

async function revokeSession(
  sessionId: string,
  keepGitLabTokens: boolean,
  deps: AdminDeps,
): Promise<number> {
  const revoker = gitLabRevoker(keepGitLabTokens, deps);
  const session = await deps.store.readSession(sessionId);
  if (!session) {
    deps.logger.warn("no such session", { action: "sessions revoke", sessionId });
    return 1;
  }
  const ending = await openAll([session], revoker, deps);
  const user = session.value.upstreamUsername;
  await endSessions(ending, revoker, { action: "sessions revoke", sessionId, user }, deps);
  return 0;
}

/**
 * A client's registration goes, and with it every session signed in through it. A client with
 * no registration (any client id may sign in under REDIRECT_URI_POLICY=any; a registration
 * lapses while refreshes keep its sessions) still has its sessions ended; exit 1 only when there
 * is neither.
 */
async function deleteClient(
  clientId: string,
  keepGitLabTokens: boolean,
  deps: AdminDeps,
): Promise<number> {
  const revoker = gitLabRevoker(keepGitLabTokens, deps);
  const ending = await openAll(await deps.store.listSessions({ clientId }), revoker, deps);
  if (!await deps.store.deleteClient(clientId) && ending.length === 0) {
    deps.logger.warn("no such client", { action: "clients delete", clientId });
    return 1;
  }
  // Sessions signed in since the listing are ended too; their tokens were not checked above.
  const known = new Set(ending.map(({ session }) => session.value.id));
  const late = (await deps.store.listSessions({ clientId }))
    .filter((session) => !known.has(session.value.id));
  const lateEnding = await openAll(late, revoker, deps, { refuse: false });
  await endSessions(
    [...ending, ...lateEnding],
    revoker,
    { action: "clients delete", clientId },
    deps,
  );
  return 0;
}

/**
 * GitLab, when the command is to revoke tokens and this environment has all it needs to;
 * throws AdminRefusal naming what is missing, before anything is read or changed.
 */
function gitLabRevoker(keepGitLabTokens: boolean, deps: AdminDeps): Revoker {
  if (keepGitLabTokens) return undefined;
  const missing = [
    ...(deps.upstream ? [] : ["GITLAB_CLIENT_ID"]),
    ...(deps.missingForRevocation ?? []),
  ];
  if (missing.length === 0) return deps.upstream;
  throw new AdminRefusal(
    `cannot revoke GitLab tokens: ${missing.join(", ")} not set; nothing was ended. Run with ` +
      "the service's environment, or add --keep-gitlab-tokens to end the sessions and leave " +
      "their GitLab tokens valid at GitLab.",
  );
}

function iso(epochMs: number): string {
  return new Date(epochMs).toISOString();
}
