/**
 * MCP sessions bound to our sessions (MCP security best practices, "session hijacking"): an
 * `Mcp-Session-Id` the MCP server hands out is bound to the session it was handed to before the
 * client sees it, and a request carrying one works only with that session.
 */

import type { Clock } from "../clock.ts";
import type { Logger } from "../logger.ts";
import type { SessionConfig } from "../session/config.ts";
import { OAuthError } from "../http/errors.ts";
import type { Store } from "../store/mod.ts";
import type { AuthenticatedRequest } from "./guard.ts";
import type { VerifiedTokens } from "./verified_tokens.ts";

/** What binding MCP sessions uses. */
export interface BindingDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  verifiedTokens: VerifiedTokens;
  config: Pick<SessionConfig, "sessionIdleTtlSeconds">;
}

/** Whom an `Mcp-Session-Id` is bound to, once read (from memory, or beside the session). */
export interface McpSessionOwner {
  read: boolean;
  /** Read from memory: remembering it again would let memory renew itself past its TTL. */
  remembered: boolean;
  sessionId: string | null;
}

export function rememberedOwner(
  deps: Pick<BindingDeps, "verifiedTokens" | "clock">,
  mcpSessionId: string | null,
): McpSessionOwner {
  const remembered = mcpSessionId === null
    ? undefined
    : deps.verifiedTokens.mcpSessionOwner(mcpSessionId, deps.clock.now());
  const found = remembered !== undefined;
  return { read: found, remembered: found, sessionId: remembered ?? null };
}

/**
 * 404 unless `mcpSessionId` was handed to this request's session. Read here only when the
 * token came from memory, so the session was not read (and the binding not beside it).
 */
export async function requireOwnMcpSession(
  deps: Pick<BindingDeps, "store" | "verifiedTokens" | "clock">,
  auth: AuthenticatedRequest,
  mcpSessionId: string,
  owner: McpSessionOwner,
): Promise<void> {
  const { store, verifiedTokens, clock } = deps;
  const sessionId = owner.read ? owner.sessionId : await store.mcpSessionOwner(mcpSessionId);
  if (sessionId !== auth.sessionId) throw unknownMcpSession();
  if (!owner.remembered) verifiedTokens.rememberMcpSession(mcpSessionId, sessionId, clock.now());
}

/**
 * The store as the resource guard sees it for a request with an `Mcp-Session-Id`: every session
 * read also reads whom that id is bound to, in the same KV read (only once the access token's
 * signature holds, so a request without a valid token costs no KV read).
 */
export function storeReadingOwner(
  store: Store,
  mcpSessionId: string,
  owner: McpSessionOwner,
): Store {
  return {
    ...store,
    async getSession(id) {
      const { session, mcpSessionOwner } = await store.getSessionWithMcpOwner(id, mcpSessionId);
      owner.read = true;
      owner.sessionId = mcpSessionOwner;
      return session;
    },
  };
}

/**
 * Binds an `Mcp-Session-Id` the MCP server hands out (`issued`, from its answer's headers) to
 * the session it was handed to, before the client sees it; forgets it when the MCP server ends
 * the session (a DELETE it answered `ok`). Undefined when the answer does neither, as most do:
 * nothing to wait for.
 */
export function trackMcpSession(
  deps: BindingDeps,
  requestId: string,
  method: string,
  auth: AuthenticatedRequest,
  answer: { sent: string | null; issued: string | undefined; ok: boolean },
): Promise<void> | undefined {
  const { sent, issued, ok } = answer;
  const bound = issued !== sent ? issued : undefined;
  const ended = method === "DELETE" && ok ? sent ?? undefined : undefined;
  return bound !== undefined || ended !== undefined
    ? updateMcpSession(deps, requestId, auth, { bound, ended })
    : undefined;
}

/** Binds `bound` to the request's session and forgets `ended`, each when given. */
async function updateMcpSession(
  deps: BindingDeps,
  requestId: string,
  auth: AuthenticatedRequest,
  { bound, ended }: { bound: string | undefined; ended: string | undefined },
): Promise<void> {
  const { store, clock, config, verifiedTokens } = deps;
  if (bound !== undefined) {
    const expiresAt = clock.now() + config.sessionIdleTtlSeconds * 1000;
    if (await store.bindMcpSession(bound, auth.sessionId, expiresAt)) {
      verifiedTokens.rememberMcpSession(bound, auth.sessionId, clock.now());
    } else {
      deps.logger.warn("MCP server handed out a session id bound to another session", {
        requestId,
        sessionId: auth.sessionId,
      });
      throw new OAuthError(502, "bad_gateway", "The MCP server answered with another's session");
    }
  }
  if (ended !== undefined) {
    await store.unbindMcpSession(ended);
    verifiedTokens.forgetMcpSession(ended);
  }
}

/**
 * 404, the MCP answer for a session the server does not know: an `Mcp-Session-Id` never handed
 * to this token's session (another user's, expired, or made up) does not reach the MCP server.
 */
function unknownMcpSession(): OAuthError {
  return new OAuthError(404, "invalid_request", "Unknown MCP session; start a new one");
}
