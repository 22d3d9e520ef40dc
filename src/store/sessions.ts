/**
 * Session records: a signed-in user's session, its current refresh token's hash, its sealed
 * upstream tokens and the opt-in refresh grace. What a session's life means (when a token is
 * current, when a grace applies) is decided in `src/session/life.ts`; this module keeps the
 * records and their atomic transitions.
 */

import type { SecretBox } from "../secret_box.ts";
import type { AtomicWrite } from "./group_commit.ts";
import type { StoreIo, Versioned } from "./io.ts";
import { withIdleIndex, withoutIdleIndex } from "./idle_sessions.ts";
import { sessionKey } from "./keys.ts";
import { sessionFromStored, type SessionRecord, type UpstreamTokenPair } from "./records.ts";
import { sessionIdOf } from "./session_tokens.ts";

/**
 * Longer than any session id (a UUID), and short enough as a key for every store (KV refuses a
 * key over 2048 bytes: 256 characters are at most 1024).
 */
const MAX_SESSION_ID_LENGTH = 256;

/** Opt-in: the previous refresh token may fetch `response` once more until `untilMs`. */
export interface RefreshGrace {
  untilMs: number;
  /** The serialized token response that rotation answered. */
  response: string;
}

/** What taking a session's refresh grace came to. */
export type TakenGrace =
  | { kind: "taken"; response: string }
  /** The kept response cannot be opened (sealed under a retired key): no grace. */
  | { kind: "unusable" }
  /** The session changed since it was read: read again and decide again. */
  | { kind: "conflict" };

/** The session operations of the store. */
export interface SessionStore {
  /** A live session (not past its inactivity expiry), or null. */
  getSession(id: string): Promise<Versioned<SessionRecord> | null>;
  /**
   * The live session a code or refresh token names, or null; whether the token is that
   * session's current one is the caller's question (`src/session/life.ts`).
   */
  getSessionNamedBy(token: string): Promise<Versioned<SessionRecord> | null>;
  /**
   * Replaces the session's refresh token with a new one and stores the session, all or
   * nothing; false when the session changed since read (a concurrent rotation won).
   */
  rotateRefreshToken(
    session: Versioned<SessionRecord>,
    updated: SessionRecord,
    grace?: RefreshGrace,
  ): Promise<boolean>;
  /** Removes the session's refresh grace, once, and answers the response it kept. */
  takeRefreshGrace(session: Versioned<SessionRecord>): Promise<TakenGrace>;
  /** Stores new upstream tokens in the session; null when the session changed since read. */
  saveSession(
    session: Versioned<SessionRecord>,
    updated: SessionRecord,
  ): Promise<Versioned<SessionRecord> | null>;
  /** Deletes a session, which ends its refresh token (and any grace) with it. */
  deleteSession(id: string): Promise<void>;
  /** Deletes the session if unchanged since read; false when it changed or is gone. */
  deleteSessionIfUnchanged(session: Versioned<SessionRecord>): Promise<boolean>;
  /** Seals upstream tokens for `SessionRecord.sealedUpstreamTokens`. */
  sealUpstreamTokens(tokens: UpstreamTokenPair): Promise<string>;
  /** Opens a session's upstream tokens; null when sealed under a key we no longer hold. */
  openUpstreamTokens(
    session: Pick<SessionRecord, "sealedUpstreamTokens">,
  ): Promise<UpstreamTokenPair | null>;
}

/** What the code and flow records need of sessions beyond the store's operations. */
export interface SessionRecords extends SessionStore {
  /** The stored session if it is live and its tokens can be opened; else null. */
  liveSessionOf(stored: Versioned<SessionRecord>): Promise<Versioned<SessionRecord> | null>;
  /** A session read as stored, under today's field names. */
  fromStored(stored: Versioned<SessionRecord> | null): Versioned<SessionRecord> | null;
  /**
   * Adds to `op` the write of the session with its new refresh token (the caller hashed it into
   * `updated`); with a grace, the session also keeps what the previous token may fetch once more.
   */
  writeRotated(
    op: AtomicWrite,
    previous: Versioned<SessionRecord>,
    updated: SessionRecord,
    grace?: RefreshGrace,
  ): Promise<void>;
}

/** Session records over the shared KV access and the box that seals secrets at rest. */
export function createSessionRecords(io: StoreIo, secrets: SecretBox): SessionRecords {
  /** A record sealed under a key we no longer hold reads as absent, not as a server error. */
  async function openSealed<T>(sealed: string): Promise<T | null> {
    try {
      return JSON.parse(await secrets.open(sealed));
    } catch {
      return null;
    }
  }

  function fromStored(stored: Versioned<SessionRecord> | null): Versioned<SessionRecord> | null {
    return stored && { ...stored, value: sessionFromStored(stored.value) };
  }

  /** Past its inactivity expiry, or sealed under a key we no longer hold: absent. */
  async function liveSessionOf(
    stored: Versioned<SessionRecord>,
  ): Promise<Versioned<SessionRecord> | null> {
    const { expiresAt, sealedUpstreamTokens } = stored.value;
    const usable = io.isLive({ expiresAt }) && typeof sealedUpstreamTokens === "string" &&
      await secrets.canOpen(sealedUpstreamTokens);
    return usable ? stored : null;
  }

  async function getSession(id: string): Promise<Versioned<SessionRecord> | null> {
    // A signed token's `sid` may be longer than a key the store reads (a 500): none is a session.
    if (id.length > MAX_SESSION_ID_LENGTH) return null;
    const stored = fromStored(await io.read<SessionRecord>(sessionKey(id)));
    return stored && await liveSessionOf(stored);
  }

  /**
   * A session as it is written: its upstream tokens sealed again if the key they were sealed
   * under has been retired (JWT_SECRET_PREVIOUS), so a rotation completes as sessions move.
   */
  async function resealedIfRetired(session: SessionRecord): Promise<SessionRecord> {
    if (await secrets.isCurrent(session.sealedUpstreamTokens)) return session;
    const tokens = await openSealed<UpstreamTokenPair>(session.sealedUpstreamTokens);
    if (!tokens) return session;
    return { ...session, sealedUpstreamTokens: await secrets.seal(JSON.stringify(tokens)) };
  }

  async function writeRotated(
    op: AtomicWrite,
    previous: Versioned<SessionRecord>,
    updated: SessionRecord,
    grace?: RefreshGrace,
  ): Promise<void> {
    const { previousRefresh: _dropped, ...session } = updated;
    const previousHash = previous.value.mcpRefreshTokenHash;
    const value: SessionRecord = previousHash && grace
      ? {
        ...session,
        previousRefresh: {
          hash: previousHash,
          untilMs: grace.untilMs,
          sealedResponse: await secrets.seal(grace.response),
        },
      }
      : session;
    const indexed = withIdleIndex(io, op, previous.value, await resealedIfRetired(value));
    op.set(sessionKey(updated.id), indexed.value, { expireIn: indexed.expireIn });
  }

  return {
    liveSessionOf,
    fromStored,
    writeRotated,
    getSession,

    getSessionNamedBy(token) {
      const sessionId = sessionIdOf(token);
      return sessionId ? getSession(sessionId) : Promise.resolve(null);
    },

    async rotateRefreshToken(session, updated, grace) {
      const op = io.atomic().check(session);
      await writeRotated(op, session, updated, grace);
      return io.commit(op);
    },

    async takeRefreshGrace(session) {
      const grace = session.value.previousRefresh;
      const response = grace && await secrets.open(grace.sealedResponse).catch(() => null);
      if (typeof response !== "string") return { kind: "unusable" };
      const { previousRefresh: _taken, ...rest } = session.value;
      const op = io.atomic().check(session);
      const indexed = withIdleIndex(io, op, session.value, await resealedIfRetired(rest));
      op.set(session.key, indexed.value, { expireIn: indexed.expireIn });
      return await io.commit(op) ? { kind: "taken", response } : { kind: "conflict" };
    },

    async saveSession(session, updated) {
      const op = io.atomic().check(session);
      const { value, expireIn } = withIdleIndex(
        io,
        op,
        session.value,
        await resealedIfRetired(updated),
      );
      const result = await op.set(session.key, value, { expireIn }).commit();
      return result.ok ? { key: session.key, value, versionstamp: result.versionstamp } : null;
    },

    async deleteSession(id) {
      // A rotation that read the session before this delete fails its versionstamp check.
      await io.commit(io.atomic().delete(sessionKey(id)));
    },

    deleteSessionIfUnchanged(session) {
      return io.commit(
        withoutIdleIndex(io.atomic().check(session).delete(session.key), session.value),
      );
    },

    sealUpstreamTokens({ accessToken, refreshToken }) {
      return secrets.seal(JSON.stringify({ accessToken, refreshToken }));
    },

    openUpstreamTokens(session) {
      return openSealed<UpstreamTokenPair>(session.sealedUpstreamTokens);
    },
  };
}
