/**
 * A short memory of access tokens the resource guard has just accepted, with the session and
 * GitLab token it found for them. An MCP client sends the same token with every tool call, so a
 * call that follows within a second skips the signature check, the session read and the GitLab
 * token's decryption. The memory is per process and lasts at most `ttlMs`: a session ended by
 * another instance (or by an operator) is refused everywhere within that time, and at once here
 * when it ended in this process (`forgetSession`). The gateway also remembers, as briefly, which
 * of our sessions an `Mcp-Session-Id` was bound to: a binding never moves to another session, so
 * memory can only keep an ended MCP session usable by its own owner for that second.
 */

import type { AccessTokenClaims } from "../jwt.ts";
import type { SessionRecord } from "../store/records.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../session/upstream_refresh.ts";

/** How long an accepted token is remembered: the bound on how late a revocation bites. */
export const VERIFIED_TOKEN_TTL_MS = 1000;
/** Tokens remembered at once; the oldest goes first. */
const MAX_ENTRIES = 10_000;

/**
 * What a request needs of its session once the token is accepted. The memory keeps only this,
 * not the whole record (sealed GitLab tokens, hashes, scopes): every cold call's entry outlives
 * a few young-generation collections, so what it holds is promoted and only a full collection
 * frees it.
 */
export type RememberedSession = Pick<
  SessionRecord,
  | "id"
  | "upstreamUserId"
  | "upstreamUsername"
  | "clientId"
  | "access"
  | "expiresAt"
  | "upstreamTokenExpiry"
>;

/** What the guard found for a token it accepted. */
export interface VerifiedToken {
  /** The verified claims; `iss` is the issuer it was verified for. */
  claims: AccessTokenClaims;
  /** The token's `exp`, in milliseconds. */
  expiresAtMs: number;
  session: RememberedSession;
  /** The session's GitLab access token, opened. */
  upstreamToken: string;
}

/** The memory of accepted tokens. */
export interface VerifiedTokens {
  /**
   * What was found for `token` when it was accepted for `issuer` less than the TTL ago, and is
   * still valid.
   */
  get(token: string, issuer: string, nowMs: number): VerifiedToken | undefined;
  /** Remembers an accepted token, unless it or its GitLab token is about to need a check. */
  remember(token: string, found: VerifiedToken, nowMs: number): void;
  /**
   * Forgets every token (and MCP session binding) of a session that just ended, and never
   * remembers one of it again (a check that read the session before it ended may finish after).
   */
  forgetSession(sessionId: string): void;
  /** The session `mcpSessionId` was found bound to less than the TTL ago, if any. */
  mcpSessionOwner(mcpSessionId: string, nowMs: number): string | undefined;
  /** Remembers that `mcpSessionId` is bound to `sessionId`. */
  rememberMcpSession(mcpSessionId: string, sessionId: string, nowMs: number): void;
  /** Forgets a binding that just ended. */
  forgetMcpSession(mcpSessionId: string): void;
  /** How many tokens are held now, expired ones not yet dropped included. */
  size(): number;
}

interface Entry extends VerifiedToken {
  untilMs: number;
}

/** An empty memory, with entries living `ttlMs` (0 remembers nothing). */
export function createVerifiedTokens(ttlMs = VERIFIED_TOKEN_TTL_MS): VerifiedTokens {
  const entries = new Map<string, Entry>();
  const owners = new Map<string, { sessionId: string; untilMs: number }>();
  /** Sessions that ended in this process, newest last (ids are random: one never comes back). */
  const ended = new Set<string>();
  return {
    get(token, issuer, nowMs) {
      const entry = entries.get(token);
      if (!entry) return undefined;
      if (entry.untilMs <= nowMs) {
        entries.delete(token);
        return undefined;
      }
      // Without BASE_URL the issuer follows the request's host: another host checks anew.
      return entry.claims.iss === issuer ? entry : undefined;
    },
    remember(token, found, nowMs) {
      if (ended.has(found.session.id)) return;
      const untilMs = Math.min(
        nowMs + ttlMs,
        // The token's and the session's own ends, and the moment the GitLab token must be
        // refreshed: each is decided by the full check, never from memory.
        found.expiresAtMs,
        found.session.expiresAt,
        upstreamRefreshDueMs(found.session),
      );
      if (untilMs <= nowMs) return;
      entries.delete(token);
      dropExpiredHead(entries, nowMs);
      if (entries.size >= MAX_ENTRIES) dropOldest(entries, nowMs);
      entries.set(token, {
        claims: found.claims,
        expiresAtMs: found.expiresAtMs,
        session: rememberedSession(found.session),
        upstreamToken: found.upstreamToken,
        untilMs,
      });
    },
    forgetSession(sessionId) {
      ended.add(sessionId);
      if (ended.size > MAX_ENTRIES) ended.delete(ended.values().next().value ?? "");
      for (const [token, entry] of entries) {
        if (entry.session.id === sessionId) entries.delete(token);
      }
      for (const [mcpSessionId, owner] of owners) {
        if (owner.sessionId === sessionId) owners.delete(mcpSessionId);
      }
    },
    mcpSessionOwner(mcpSessionId, nowMs) {
      const owner = owners.get(mcpSessionId);
      if (!owner) return undefined;
      if (owner.untilMs > nowMs) return owner.sessionId;
      owners.delete(mcpSessionId);
      return undefined;
    },
    rememberMcpSession(mcpSessionId, sessionId, nowMs) {
      if (ttlMs <= 0) return;
      owners.delete(mcpSessionId);
      dropExpiredHead(owners, nowMs);
      if (owners.size >= MAX_ENTRIES) dropOldest(owners, nowMs);
      owners.set(mcpSessionId, { sessionId, untilMs: nowMs + ttlMs });
    },
    forgetMcpSession(mcpSessionId) {
      owners.delete(mcpSessionId);
    },
    size: () => entries.size,
  };
}

/** The fields of `session` a remembered token answers with (a copy: the record is not kept). */
function rememberedSession(session: RememberedSession): RememberedSession {
  const { id, upstreamUserId, upstreamUsername, clientId, access, expiresAt } = session;
  const { upstreamTokenExpiry } = session;
  return { id, upstreamUserId, upstreamUsername, clientId, access, expiresAt, upstreamTokenExpiry };
}

function upstreamRefreshDueMs(session: RememberedSession): number {
  return session.upstreamTokenExpiry === 0
    ? Infinity
    : session.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS;
}

/**
 * Drops the expired entries at the head of `entries`: entries are set in the order they were
 * remembered, each for at most the TTL, so those at the head expire first. Without this a token
 * never sent again stays until the map is full: up to MAX_ENTRIES stale entries held for good,
 * each a full collection's work (issue 39: the cold gateway's peak RSS).
 */
function dropExpiredHead(entries: Map<string, { untilMs: number }>, nowMs: number): void {
  for (const [key, entry] of entries) {
    if (entry.untilMs > nowMs) return;
    entries.delete(key);
  }
}

/** Drops expired entries, and the oldest one if none had expired. */
function dropOldest(entries: Map<string, { untilMs: number }>, nowMs: number): void {
  for (const [token, entry] of entries) {
    if (entry.untilMs <= nowMs) entries.delete(token);
  }
  if (entries.size < MAX_ENTRIES) return;
  const oldest = entries.keys().next();
  if (!oldest.done) entries.delete(oldest.value);
}
