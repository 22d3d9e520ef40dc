/**
 * MCP session bindings: which of our sessions an MCP server's `Mcp-Session-Id` was handed to,
 * so that another session's token cannot ride on it (MCP security best practices, "session
 * hijacking"). Keyed by the id's hash; a binding lives a bounded time (the caller says). Each
 * session holds at most MAX_MCP_SESSIONS_PER_SESSION bindings: a new one beyond that evicts the
 * oldest (whose MCP session then gets the gateway's 404, and the client starts a new one), so a
 * token holder cannot grow KV without bound. A session's bindings end with it.
 */

import type { StoreIo, Versioned } from "./io.ts";
import {
  mcpSessionHash,
  mcpSessionIndexKey,
  mcpSessionIndexPrefix,
  mcpSessionKey,
  mcpSessionKeyOfHash,
  sessionKey,
} from "./keys.ts";
import type { SessionRecord } from "./records.ts";
import type { SessionRecords } from "./sessions.ts";

/** What a binding stores. */
export interface McpSessionBinding {
  /** Our session the MCP session belongs to. */
  sessionId: string;
  /** Epoch ms after which the binding is forgotten. */
  expiresAt: number;
}

/** A session's index entry for one of its bindings. */
export interface McpSessionIndexEntry {
  /** The binding's key hash. */
  hash: string;
  expiresAt: number;
}

/** How many MCP sessions one of our sessions may hold at once. */
export const MAX_MCP_SESSIONS_PER_SESSION = 100;

/** A live session (as `getSession` reads it) and whom an MCP session id is bound to. */
export interface SessionWithMcpOwner {
  session: Versioned<SessionRecord> | null;
  /** The session `mcpSessionId` is bound to; null when it is unknown or expired. */
  mcpSessionOwner: string | null;
}

/** The MCP session binding operations of the store. */
export interface McpSessionStore {
  /** The session `mcpSessionId` is bound to, or null when it is unknown or expired. */
  mcpSessionOwner(mcpSessionId: string): Promise<string | null>;
  /**
   * `getSession(sessionId)` and `mcpSessionOwner(mcpSessionId)` in one KV read: what the gateway
   * needs of a request that carries an `Mcp-Session-Id`.
   */
  getSessionWithMcpOwner(sessionId: string, mcpSessionId: string): Promise<SessionWithMcpOwner>;
  /**
   * Binds `mcpSessionId` to `sessionId` until `expiresAt`; false when it is bound to another
   * session already (which keeps it). A session at its cap loses its oldest binding.
   */
  bindMcpSession(mcpSessionId: string, sessionId: string, expiresAt: number): Promise<boolean>;
  /** Forgets a binding (the MCP session was ended). */
  unbindMcpSession(mcpSessionId: string): Promise<void>;
  /** Forgets every binding of a session (the session ended). */
  unbindMcpSessionsOf(sessionId: string): Promise<void>;
}

const BIND_ATTEMPTS = 3;
/** Index entries read beyond the cap, so expired ones and a few racing binds are cleared too. */
const EVICT_SLACK = 10;
/** Bindings deleted per commit when a session ends. */
const UNBIND_BATCH = 100;

/** Deletes an indexed binding and its index entry. */
function deleteIndexed(
  op: ReturnType<StoreIo["atomic"]>,
  entry: Versioned<McpSessionIndexEntry>,
): void {
  op.delete(mcpSessionKeyOfHash(entry.value.hash)).delete(entry.key);
}

/** MCP session bindings over the shared KV access, reading sessions the way sessions do. */
export function createMcpSessionStore(io: StoreIo, sessions: SessionRecords): McpSessionStore {
  function live(entry: Versioned<McpSessionBinding> | null): McpSessionBinding | null {
    return entry && io.isLive(entry.value) ? entry.value : null;
  }

  async function liveBinding(key: Deno.KvKey) {
    const entry = await io.read<McpSessionBinding>(key);
    return { entry, binding: live(entry) };
  }

  /** Adds to `op` the deletion of the oldest bindings that keep room for one more. */
  async function evictBeyondCap(sessionId: string, op: ReturnType<StoreIo["atomic"]>) {
    const entries = await io.listRange<McpSessionIndexEntry>(
      { prefix: mcpSessionIndexPrefix(sessionId) },
      MAX_MCP_SESSIONS_PER_SESSION + EVICT_SLACK,
    );
    const live = entries.filter((entry) => io.isLive(entry.value));
    for (const entry of entries.filter((entry) => !io.isLive(entry.value))) {
      deleteIndexed(op, entry);
    }
    const over = live.length - MAX_MCP_SESSIONS_PER_SESSION + 1;
    for (const entry of live.slice(0, Math.max(0, over))) deleteIndexed(op, entry);
  }

  return {
    async mcpSessionOwner(mcpSessionId) {
      return (await liveBinding(mcpSessionKey(mcpSessionId))).binding?.sessionId ?? null;
    },

    async getSessionWithMcpOwner(sessionId, mcpSessionId) {
      const [stored, binding] = await io.readMany([
        sessionKey(sessionId),
        mcpSessionKey(mcpSessionId),
      ]);
      const session = sessions.fromStored(stored as Versioned<SessionRecord> | null);
      return {
        session: session && await sessions.liveSessionOf(session),
        mcpSessionOwner: live(binding as Versioned<McpSessionBinding> | null)?.sessionId ?? null,
      };
    },

    async bindMcpSession(mcpSessionId, sessionId, expiresAt) {
      const key = mcpSessionKey(mcpSessionId);
      const hash = mcpSessionHash(mcpSessionId);
      const expireIn = io.ttlUntil(expiresAt);
      for (let attempt = 0; attempt < BIND_ATTEMPTS; attempt++) {
        const { entry, binding } = await liveBinding(key);
        if (binding && binding.sessionId !== sessionId) return false;
        const op = io.atomic()
          .check({ key, versionstamp: entry?.versionstamp ?? null })
          .set(key, { sessionId, expiresAt }, { expireIn });
        if (!binding) {
          await evictBeyondCap(sessionId, op);
          const indexKey = mcpSessionIndexKey(sessionId, io.clock.now(), hash);
          op.set(indexKey, { hash, expiresAt } satisfies McpSessionIndexEntry, { expireIn });
        }
        if (await io.commit(op)) return true;
      }
      return false;
    },

    async unbindMcpSession(mcpSessionId) {
      // Its index entry stays until the session ends or it expires: an index entry without a
      // binding only counts toward the cap until then, and deleting a missing binding is a no-op.
      await io.commit(io.atomic().delete(mcpSessionKey(mcpSessionId)));
    },

    async unbindMcpSessionsOf(sessionId) {
      const entries = await Array.fromAsync(
        io.list<McpSessionIndexEntry>(mcpSessionIndexPrefix(sessionId)),
      );
      // Small atomic batches: KV limits the mutations of one commit.
      for (let i = 0; i < entries.length; i += UNBIND_BATCH) {
        const op = io.atomic();
        for (const entry of entries.slice(i, i + UNBIND_BATCH)) deleteIndexed(op, entry);
        await io.commit(op);
      }
    },
  };
}
