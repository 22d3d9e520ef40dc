/**
 * What each operator command does, over the service's own store and upstream client. Lists
 * print a table (or JSON lines with `--json`) and never a token; every change is logged as one
 * JSON line naming the operator action.
 */

import type { LogFields, Logger } from "../logger.ts";
import { revokeUpstreamTokens } from "../session/end.ts";
import type { Store } from "../store/mod.ts";
import type { ClientRecord, SessionRecord } from "../store/records.ts";
import type { Upstream } from "../upstream/types.ts";
import type { AdminCommand } from "./args.ts";
import { formatTable } from "./table.ts";

/** What the commands run against. */
export interface AdminDeps {
  store: Store;
  /** Absent when OAuth is not configured: GitLab tokens are then left as they are. */
  upstream?: Upstream;
  logger: Logger;
  /** Prints one line of the command's output. */
  print(line: string): void;
  /** The KV file's size in bytes (with its WAL), or undefined when KV is no local file. */
  kvFileSize(): Promise<number | undefined>;
}

/** The commands that read or change KV (`keys generate`, `migrate` and `help` need none). */
export type StoreCommand = Exclude<AdminCommand, { name: "keys generate" | "migrate" | "help" }>;

/** Upstream revocations in flight at once: a courtesy to the GitLab instance. */
const REVOCATION_CONCURRENCY = 8;

/** Runs one command; answers the process's exit code (1: what it names does not exist). */
export async function runStoreCommand(command: StoreCommand, deps: AdminDeps): Promise<number> {
  switch (command.name) {
    case "sessions list":
      printSessions(await deps.store.listSessions({ user: command.user }), command.json, deps);
      return 0;
    case "sessions revoke":
      return "user" in command.by
        ? await revokeUserSessions(command.by.user, deps)
        : await revokeSession(command.by.id, deps);
    case "clients list":
      printClients(await deps.store.listClients(), command.json, deps);
      return 0;
    case "clients delete":
      return await deleteClient(command.clientId, deps);
    case "stats":
      await printStats(command.json, deps);
      return 0;
  }
}

/** One line a session: never its refresh token's hash nor its sealed upstream tokens. */
function sessionView(session: SessionRecord) {
  return {
    id: session.id,
    userId: session.upstreamUserId,
    username: session.upstreamUsername,
    clientId: session.clientId,
    scopes: session.scopes.join(" "),
    createdAt: iso(session.createdAt),
    lastRefreshedAt: iso(session.updatedAt),
    expiresAt: iso(session.expiresAt),
  };
}

function printSessions(sessions: SessionRecord[], json: boolean, deps: AdminDeps): void {
  const views = sessions.map(sessionView);
  if (json) return views.forEach((view) => deps.print(JSON.stringify(view)));
  const rows = views.map((v) => [
    v.id,
    `${v.username} (${v.userId})`,
    v.clientId,
    v.createdAt,
    v.lastRefreshedAt,
    v.expiresAt,
  ]);
  formatTable(["SESSION", "USER", "CLIENT", "CREATED", "LAST REFRESH", "EXPIRES"], rows)
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
  if (json) return views.forEach((view) => deps.print(JSON.stringify(view)));
  const rows = views.map((v) => [v.clientId, v.name, v.issuedAt, v.redirectUris.join(" ")]);
  formatTable(["CLIENT", "NAME", "REGISTERED", "REDIRECT URIS"], rows)
    .forEach((line) => deps.print(line));
  deps.print(`${clients.length} client(s)`);
}

async function printStats(json: boolean, deps: AdminDeps): Promise<void> {
  const [counts, kvFileBytes] = await Promise.all([
    deps.store.countRecords(),
    deps.kvFileSize(),
  ]);
  const { flows: pendingFlows, sessions, clients } = counts;
  const stats = { pendingFlows, sessions, clients, kvFileBytes: kvFileBytes ?? null };
  if (json) return deps.print(JSON.stringify(stats));
  formatTable(["", ""], [
    ["pending flows", String(stats.pendingFlows)],
    ["sessions", String(stats.sessions)],
    ["clients", String(stats.clients)],
    ["KV file", kvFileBytes === undefined ? "not a local file" : `${kvFileBytes} bytes`],
  ]).slice(1).forEach((line) => deps.print(line));
}

/** Offboarding: every session of the user ends, and their GitLab tokens are revoked. */
async function revokeUserSessions(user: string, deps: AdminDeps): Promise<number> {
  const sessions = await deps.store.listSessions({ user });
  await endSessions(sessions, { action: "sessions revoke", user }, deps);
  return 0;
}

async function revokeSession(sessionId: string, deps: AdminDeps): Promise<number> {
  const session = await deps.store.getSession(sessionId);
  if (!session) {
    deps.logger.warn("no such session", { action: "sessions revoke", sessionId });
    return 1;
  }
  const user = session.value.upstreamUsername;
  await endSessions([session.value], { action: "sessions revoke", sessionId, user }, deps);
  return 0;
}

/** A client's registration goes, and with it every session signed in through it. */
async function deleteClient(clientId: string, deps: AdminDeps): Promise<number> {
  if (!await deps.store.deleteClient(clientId)) {
    deps.logger.warn("no such client", { action: "clients delete", clientId });
    return 1;
  }
  const sessions = await deps.store.listSessions({ clientId });
  await endSessions(sessions, { action: "clients delete", clientId }, deps);
  return 0;
}

/**
 * Deletes the sessions first (their tokens stop working at once), then revokes their upstream
 * tokens, best effort (a failure is logged and counted, never retried), and logs the operator
 * action: `named` (the action and what it named), the sessions ended, the revocations.
 */
async function endSessions(
  sessions: SessionRecord[],
  named: LogFields & { action: string },
  deps: AdminDeps,
): Promise<void> {
  await deps.store.deleteSessions(sessions.map((session) => session.id));
  let gitlabTokensRevoked = 0;
  const { upstream } = deps;
  if (upstream) {
    let next = 0;
    const worker = async () => {
      while (next < sessions.length) {
        const session = sessions[next++];
        const fields = { sessionId: session.id };
        if (await revokeUpstreamTokens({ ...deps, upstream }, session, fields)) {
          gitlabTokensRevoked++;
        }
      }
    };
    await Promise.all(Array.from({ length: REVOCATION_CONCURRENCY }, worker));
  } else if (sessions.length > 0) {
    deps.logger.warn("OAuth is not configured: the upstream tokens were not revoked");
  }
  deps.logger.info("operator action", {
    ...named,
    sessions: sessions.length,
    gitlabTokensRevoked,
    gitlabRevocationsFailed: upstream ? sessions.length - gitlabTokensRevoked : 0,
  });
}

function iso(epochMs: number): string {
  return new Date(epochMs).toISOString();
}
