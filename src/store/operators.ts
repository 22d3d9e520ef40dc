/**
 * What an operator's tools (`deno task admin`) need of the store: every session or client
 * listed, clients deleted, records counted (sessions end through `deleteSessionIfUnchanged`, as
 * the service ends them, so a renewal saved since the listing is not lost). Safe beside a running
 * service on the same KV: every change is an atomic commit, and a rotation that read a session
 * before its delete fails its versionstamp check.
 *
 * Sessions have no per-user index (it would cost every sign-in and every rotation a second
 * key); finding a user's sessions is one scan of the session records, measured at about a
 * second per 100,000 sessions (docs/operating.md "Operator's CLI").
 */

import type { StoreIo, Versioned } from "./io.ts";
import { clientKey, recordPrefix, sessionKey } from "./keys.ts";
import { type ClientRecord, sessionFromStored, type SessionRecord } from "./records.ts";

/**
 * Which sessions: those of a user (`user`: GitLab username in any case, or GitLab user id;
 * `userId` or `username`: only that), of a client.
 */
export interface SessionFilter {
  user?: string;
  userId?: string;
  username?: string;
  clientId?: string;
}

/** How many records of each kind the KV holds (live or not yet collected). */
export interface RecordCounts {
  flows: number;
  sessions: number;
  clients: number;
  /** Operator-registered machine clients (`admin clients add`). */
  machineClients: number;
}

/** The operator's operations of the store. */
export interface OperatorStore {
  /**
   * Every live session matching `filter` (all of them without one), oldest first, as read: to
   * be ended only if unchanged since.
   */
  listSessions(filter?: SessionFilter): Promise<Versioned<SessionRecord>[]>;
  /**
   * How many sessions are live: one scan, a page of records held at a time (the metrics'
   * `sessions_alive`; listing them would hold every session at once).
   */
  countLiveSessions(): Promise<number>;
  /**
   * The session `id` if it has not expired, whatever key sealed its GitLab tokens (unlike
   * getSession, which treats a session it cannot open as absent): the operator must learn
   * that it exists and cannot be opened, not that there is none.
   */
  readSession(id: string): Promise<Versioned<SessionRecord> | null>;
  /** Every registered client, oldest first. */
  listClients(): Promise<ClientRecord[]>;
  /** Deletes a registered client; false when there was none. */
  deleteClient(clientId: string): Promise<boolean>;
  /** Counts pending flows, sessions and registered clients. */
  countRecords(): Promise<RecordCounts>;
}

/** Whether `session` belongs to the user `user` names (username or numeric id). */
export function sessionBelongsTo(session: SessionRecord, user: string): boolean {
  const wanted = user.trim();
  if (session.upstreamUserId === wanted) return true;
  return session.upstreamUsername.toLowerCase() === wanted.toLowerCase();
}

function matches(session: SessionRecord, filter: SessionFilter): boolean {
  const { user, userId, username, clientId } = filter;
  return (user === undefined || sessionBelongsTo(session, user)) &&
    (userId === undefined || session.upstreamUserId === userId) &&
    (username === undefined || session.upstreamUsername.toLowerCase() === username.toLowerCase()) &&
    (clientId === undefined || session.clientId === clientId);
}

/** Operator operations over the shared KV access. */
export function createOperatorStore(io: StoreIo): OperatorStore {
  async function count(prefix: Deno.KvKey): Promise<number> {
    let n = 0;
    for await (const _ of io.list(prefix)) n++;
    return n;
  }

  return {
    async listSessions(filter = {}) {
      const found: Versioned<SessionRecord>[] = [];
      for await (const entry of io.list<SessionRecord>(recordPrefix("session"))) {
        const session = sessionFromStored(entry.value);
        if (!io.isLive(session)) continue;
        if (matches(session, filter)) found.push({ ...entry, value: session });
      }
      return found.sort((a, b) => a.value.createdAt - b.value.createdAt);
    },

    async countLiveSessions() {
      let live = 0;
      for await (const entry of io.list<SessionRecord>(recordPrefix("session"))) {
        if (io.isLive(entry.value)) live++;
      }
      return live;
    },

    async readSession(id) {
      const stored = await io.read<SessionRecord>(sessionKey(id));
      if (!stored) return null;
      const session = sessionFromStored(stored.value);
      return io.isLive(session) ? { ...stored, value: session } : null;
    },

    async listClients() {
      const clients: ClientRecord[] = [];
      for await (const entry of io.list<ClientRecord>(recordPrefix("client"))) {
        // A registration past its expiry is forgotten, even before KV collects it.
        const { expiresAt } = entry.value;
        if (expiresAt === undefined || io.isLive({ expiresAt })) clients.push(entry.value);
      }
      return clients.sort((a, b) => a.clientIdIssuedAt - b.clientIdIssuedAt);
    },

    async deleteClient(clientId) {
      const stored = await io.read<ClientRecord>(clientKey(clientId));
      if (!stored) return false;
      // Checked, so a concurrent delete is reported once.
      return await io.commit(io.atomic().check(stored).delete(stored.key));
    },

    async countRecords() {
      const [flows, sessions, clients, machineClients] = await Promise.all([
        count(recordPrefix("flow")),
        count(recordPrefix("session")),
        count(recordPrefix("client")),
        count(recordPrefix("machine_client")),
      ]);
      return { flows, sessions, clients, machineClients };
    },
  };
}
