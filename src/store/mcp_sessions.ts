/**
 * MCP session bindings: which of our sessions an MCP server's `Mcp-Session-Id` was handed to,
 * so that another session's token cannot ride on it (MCP security best practices, "session
 * hijacking"). Keyed by the id's hash; a binding lives a bounded time (the caller says).
 */

import type { StoreIo, Versioned } from "./io.ts";
import { mcpSessionKey, sessionKey } from "./keys.ts";
import type { SessionRecord } from "./records.ts";
import type { SessionRecords } from "./sessions.ts";

/** What a binding stores. */
export interface McpSessionBinding {
  /** Our session the MCP session belongs to. */
  sessionId: string;
  /** Epoch ms after which the binding is forgotten. */
  expiresAt: number;
}

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
   * session already (which keeps it).
   */
  bindMcpSession(mcpSessionId: string, sessionId: string, expiresAt: number): Promise<boolean>;
  /** Forgets a binding (the MCP session was ended). */
  unbindMcpSession(mcpSessionId: string): Promise<void>;
}

const BIND_ATTEMPTS = 3;

/** MCP session bindings over the shared KV access, reading sessions the way sessions do. */
export function createMcpSessionStore(io: StoreIo, sessions: SessionRecords): McpSessionStore {
  function live(entry: Versioned<McpSessionBinding> | null): McpSessionBinding | null {
    return entry && io.isLive(entry.value) ? entry.value : null;
  }

  async function liveBinding(key: Deno.KvKey) {
    const entry = await io.read<McpSessionBinding>(key);
    return { entry, binding: live(entry) };
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
      for (let attempt = 0; attempt < BIND_ATTEMPTS; attempt++) {
        const { entry, binding } = await liveBinding(key);
        if (binding && binding.sessionId !== sessionId) return false;
        const op = io.atomic()
          .check({ key, versionstamp: entry?.versionstamp ?? null })
          .set(key, { sessionId, expiresAt }, { expireIn: io.ttlUntil(expiresAt) });
        if (await io.commit(op)) return true;
      }
      return false;
    },

    async unbindMcpSession(mcpSessionId) {
      await io.commit(io.atomic().delete(mcpSessionKey(mcpSessionId)));
    },
  };
}
