/**
 * MCP session bindings: which of our sessions an MCP server's `Mcp-Session-Id` was handed to,
 * so that another session's token cannot ride on it (MCP security best practices, "session
 * hijacking"). Keyed by the id's hash; a binding lives a bounded time (the caller says).
 */

import type { StoreIo } from "./io.ts";
import { mcpSessionKey } from "./keys.ts";

/** What a binding stores. */
export interface McpSessionBinding {
  /** Our session the MCP session belongs to. */
  sessionId: string;
  /** Epoch ms after which the binding is forgotten. */
  expiresAt: number;
}

/** The MCP session binding operations of the store. */
export interface McpSessionStore {
  /** The session `mcpSessionId` is bound to, or null when it is unknown or expired. */
  mcpSessionOwner(mcpSessionId: string): Promise<string | null>;
  /**
   * Binds `mcpSessionId` to `sessionId` until `expiresAt`; false when it is bound to another
   * session already (which keeps it).
   */
  bindMcpSession(mcpSessionId: string, sessionId: string, expiresAt: number): Promise<boolean>;
  /** Forgets a binding (the MCP session was ended). */
  unbindMcpSession(mcpSessionId: string): Promise<void>;
}

const BIND_ATTEMPTS = 3;

/** MCP session bindings over the shared KV access. */
export function createMcpSessionStore(io: StoreIo): McpSessionStore {
  async function liveBinding(key: Deno.KvKey) {
    const entry = await io.read<McpSessionBinding>(key);
    return { entry, binding: entry && io.isLive(entry.value) ? entry.value : null };
  }

  return {
    async mcpSessionOwner(mcpSessionId) {
      return (await liveBinding(mcpSessionKey(mcpSessionId))).binding?.sessionId ?? null;
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
