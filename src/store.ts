/**
 * All persistent state, in Deno KV. This is the only module that knows the keys:
 *
 * | key                                | value                 | lifetime (expireIn = GC only) |
 * |------------------------------------|-----------------------|-------------------------------|
 * | ["flow", sha256(flow_state)]       | FlowRecord            | upstream `expires_in`         |
 * | ["code", sha256(code)]             | CodeRecord            | 10 minutes                    |
 * | ["session", session id]            | SessionRecord         | inactivity lifetime           |
 * | ["lease", kind, id]                | { expiresAt }         | a few seconds                 |
 * | ["client", client id]              | ClientRecord          | kept                          |
 * | ["rate", bucket, ip, window]       | request count         | the window                    |
 *
 * There is no refresh-token index: a refresh token names its session (session_tokens.ts) and
 * the session keeps the token's hash, so a refresh reads and writes one key. Every key touched
 * costs SQLite a page or two, which is what grows with the number of sessions.
 *
 * Deno deletes expired entries only at some point after `expireIn`, so every read also checks
 * the record's `expiresAt` against the injected clock. Every single-use or rotating transition
 * is one atomic commit guarded by the versionstamps it read.
 */

import type { Clock } from "./clock.ts";
import { sha256Base64Url } from "./crypto.ts";
import { sessionIdOf } from "./session_tokens.ts";
import type { SecretBox } from "./secret_box.ts";
import type { ClientRecord } from "./clients.ts";
import { AtomicWrite, createGroupCommit } from "./group_commit.ts";
import { createGroupRead } from "./group_read.ts";
import type {
  CodeRecord,
  FlowRecord,
  GitLabTokens,
  SessionRecord,
  UpstreamTokenSet,
} from "./records.ts";

/** A record as read, with what is needed to change it atomically later. */
export interface Versioned<T> {
  readonly key: Deno.KvKey;
  readonly value: T;
  readonly versionstamp: string;
}

/** A short exclusive claim on some work, across every instance sharing the KV. */
export interface Lease {
  release(): Promise<void>;
}

/** Opt-in: the previous refresh token may fetch `response` once more until `untilMs`. */
export interface RefreshGrace {
  untilMs: number;
  /** The serialized token response that rotation answered. */
  response: string;
}

/** What a completed device flow writes in one commit. */
export interface FlowCompletion {
  code: string;
  codeRecord: CodeRecord;
  session: SessionRecord;
}

/** A code as read, and its session (null when that is gone). */
export interface CodeAndSession {
  code: Versioned<CodeRecord>;
  session: Versioned<SessionRecord> | null;
}

/** The service's storage operations. */
export interface Store {
  createFlow(flowState: string, flow: FlowRecord): Promise<void>;
  /** The flow, even past its `expiresAt` (the caller answers "expired" then), or null. */
  getFlow(flowState: string): Promise<Versioned<FlowRecord> | null>;
  /** Deletes the flow if unchanged since read; false when someone else changed it first. */
  deleteFlow(flow: Versioned<FlowRecord>): Promise<boolean>;
  /** Keeps upstream tokens in the flow; null when the flow changed since read. */
  saveFlowUpstreamTokens(
    flow: Versioned<FlowRecord>,
    tokens: UpstreamTokenSet,
  ): Promise<Versioned<FlowRecord> | null>;
  /**
   * Records GitLab's `slow_down`: the new interval, and no upstream poll before `nextPollAt`;
   * null when the flow changed since read.
   */
  deferFlowPolling(
    flow: Versioned<FlowRecord>,
    intervalSeconds: number,
    nextPollAt: number,
  ): Promise<Versioned<FlowRecord> | null>;
  /** Stores code and session and deletes the flow, all or nothing; false if the flow changed. */
  completeFlow(flow: Versioned<FlowRecord>, completion: FlowCompletion): Promise<boolean>;

  /** The code, even past its `expiresAt`, or null. */
  getCode(code: string): Promise<Versioned<CodeRecord> | null>;
  /** The code (as getCode) and the live session it was issued for, read together. */
  getCodeAndSession(code: string): Promise<CodeAndSession | null>;
  deleteCode(code: Versioned<CodeRecord>): Promise<boolean>;
  /**
   * Consumes the code and stores the session with its first refresh token, all or nothing;
   * false when the code or session changed since read (someone else redeemed it).
   */
  redeemCode(
    code: Versioned<CodeRecord>,
    session: Versioned<SessionRecord>,
    updated: SessionRecord,
    options?: { keepRedeemedMarker?: boolean },
  ): Promise<boolean>;

  /** A live session (not past its inactivity expiry), or null. */
  getSession(id: string): Promise<Versioned<SessionRecord> | null>;
  /** The live session a refresh token belongs to, or null. */
  findSessionByRefreshToken(refreshToken: string): Promise<Versioned<SessionRecord> | null>;
  /**
   * Replaces the session's refresh token with a new one and stores the session, all or
   * nothing; false when the session changed since read (a concurrent rotation won).
   */
  rotateRefreshToken(
    session: Versioned<SessionRecord>,
    updated: SessionRecord,
    grace?: RefreshGrace,
  ): Promise<boolean>;
  /**
   * The response kept for a rotated refresh token presented again within its grace window,
   * once; null when there is none, it was used, or the session moved on since.
   */
  takeRefreshGrace(refreshToken: string): Promise<string | null>;
  /** Stores new upstream tokens in the session; null when the session changed since read. */
  saveSession(
    session: Versioned<SessionRecord>,
    updated: SessionRecord,
  ): Promise<Versioned<SessionRecord> | null>;
  /** Deletes a session, which ends its refresh token (and any grace) with it. */
  deleteSession(id: string): Promise<void>;
  /** Seals GitLab tokens for `SessionRecord.sealedGitLabTokens`. */
  sealGitLabTokens(tokens: GitLabTokens): Promise<string>;
  /** Opens a session's GitLab tokens; null when they were sealed under a key we no longer hold. */
  openGitLabTokens(session: SessionRecord): Promise<GitLabTokens | null>;

  /** Throws when KV cannot be read (health checks). */
  ping(): Promise<void>;

  /** Stores a new client registration. */
  registerClient(client: ClientRecord): Promise<void>;
  /** A registered client, or null. */
  getClient(clientId: string): Promise<ClientRecord | null>;

  /**
   * Counts one request of `ip` in the current fixed window of `bucket`; returns the count
   * including this one (requests over the limit are not counted further).
   */
  countRequest(bucket: string, ip: string, limit: number, windowMs: number): Promise<number>;

  /** Claims `kind`/`id` for `ttlMs` unless someone holds it; null when held. */
  tryLease(kind: string, id: string, ttlMs: number): Promise<Lease | null>;
  /** tryLease for the upstream work on one device flow. */
  tryLeaseFlow(flow: Versioned<FlowRecord>, ttlMs: number): Promise<Lease | null>;
}

const CODE_KEY = "code";
const FLOW_KEY = "flow";
const SESSION_KEY = "session";
const LEASE_KEY = "lease";
const CLIENT_KEY = "client";
const RATE_KEY = "rate";
const RATE_COUNT_ATTEMPTS = 5;
const TAKE_GRACE_ATTEMPTS = 5;
/** Longer than any client id we issue, well under KV's key size limit even in UTF-8. */
const MAX_CLIENT_ID_LENGTH = 256;

/** A flow as stored: the device code and GitLab tokens sealed (secrets at rest). */
type StoredFlow = Omit<FlowRecord, "deviceCode" | "upstreamTokens"> & { sealed: string };

/** Builds the store over an open KV, a clock, and the box that seals secrets at rest. */
export function createStore(kv: Deno.Kv, clock: Clock, secrets: SecretBox): Store {
  const ttlUntil = (expiresAt: number) => Math.max(1, expiresAt - clock.now());
  const isLive = (record: { expiresAt: number }) => clock.now() <= record.expiresAt;

  /** Every read goes through the group read, which merges reads waiting for the KV thread. */
  const readMany = createGroupRead((keys) => retryLocked(() => kv.getMany(keys)));

  async function read<T>(key: Deno.KvKey): Promise<Versioned<T> | null> {
    const [entry] = await readMany([key]);
    return versioned(entry as Deno.KvEntryMaybe<T>);
  }

  /**
   * The entry at `key`, and the session a code or refresh token names (`sessionId`) read with
   * it in one round trip; the caller decides whether that session is the entry's.
   */
  async function readWithNamedSession<T>(
    key: Deno.KvKey,
    sessionId: string | undefined,
  ): Promise<[Versioned<T> | null, Versioned<SessionRecord> | null]> {
    if (!sessionId) return [await read<T>(key), null];
    const [entry, session] = await readMany([key, [SESSION_KEY, sessionId]]);
    return [
      versioned(entry as Deno.KvEntryMaybe<T>),
      versioned(session as Deno.KvEntryMaybe<SessionRecord>),
    ];
  }

  const submit = createGroupCommit(({ checks, mutations }) =>
    retryLocked(() => kv.atomic().check(...checks).mutate(...mutations).commit())
  );
  /** Every write goes through the group commit, which decides what shares a transaction. */
  const atomic = () => new AtomicWrite(submit);

  async function commit(op: AtomicWrite): Promise<boolean> {
    return (await op.commit()).ok;
  }

  async function sealFlow(flow: FlowRecord): Promise<StoredFlow> {
    const { deviceCode, upstreamTokens, ...rest } = flow;
    return { ...rest, sealed: await secrets.seal(JSON.stringify({ deviceCode, upstreamTokens })) };
  }

  async function openFlow(stored: Versioned<StoredFlow>): Promise<Versioned<FlowRecord> | null> {
    const { sealed, ...rest } = stored.value;
    const opened = await openSealed<Pick<FlowRecord, "deviceCode" | "upstreamTokens">>(sealed);
    if (!opened) return null;
    const value: FlowRecord = { ...rest, deviceCode: opened.deviceCode };
    if (opened.upstreamTokens) value.upstreamTokens = opened.upstreamTokens;
    return { ...stored, value };
  }

  /**
   * A session as it is written: its GitLab tokens sealed again if the key they were sealed
   * under has been retired (JWT_SECRET_PREVIOUS), so a rotation completes as sessions move.
   */
  async function resealedIfRetired(session: SessionRecord): Promise<SessionRecord> {
    if (await secrets.isCurrent(session.sealedGitLabTokens)) return session;
    const tokens = await openSealed<GitLabTokens>(session.sealedGitLabTokens);
    if (!tokens) return session;
    return { ...session, sealedGitLabTokens: await secrets.seal(JSON.stringify(tokens)) };
  }

  /** A record sealed under a key we no longer hold reads as absent, not as a server error. */
  async function openSealed<T>(sealed: string): Promise<T | null> {
    try {
      return JSON.parse(await secrets.open(sealed));
    } catch {
      return null;
    }
  }

  async function readLiveSession(id: string): Promise<Versioned<SessionRecord> | null> {
    const stored = await read<SessionRecord>([SESSION_KEY, id]);
    return stored && await liveSessionOf(stored);
  }

  /** Past its inactivity expiry, or sealed under a key we no longer hold: absent. */
  async function liveSessionOf(
    stored: Versioned<SessionRecord>,
  ): Promise<Versioned<SessionRecord> | null> {
    const { expiresAt, sealedGitLabTokens } = stored.value;
    const usable = isLive({ expiresAt }) && typeof sealedGitLabTokens === "string" &&
      await secrets.canOpen(sealedGitLabTokens);
    return usable ? stored : null;
  }

  async function rewriteFlow(
    flow: Versioned<FlowRecord>,
    value: FlowRecord,
  ): Promise<Versioned<FlowRecord> | null> {
    const stored = await sealFlow(value);
    const result = await atomic().check(flow)
      .set(flow.key, stored, { expireIn: ttlUntil(value.expiresAt) })
      .commit();
    return result.ok ? { key: flow.key, value, versionstamp: result.versionstamp } : null;
  }

  /**
   * Adds to `op` the write of the session with its new refresh token (the caller hashed it into
   * `updated`); with a grace, the session also keeps what the previous token may fetch once more.
   */
  async function writeRotatedSession(
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
    op.set([SESSION_KEY, updated.id], await resealedIfRetired(value), {
      expireIn: ttlUntil(updated.expiresAt),
    });
  }

  return {
    async createFlow(flowState, flow) {
      const key = [FLOW_KEY, sha256Base64Url(flowState)];
      const op = atomic()
        .check({ key, versionstamp: null })
        .set(key, await sealFlow(flow), { expireIn: ttlUntil(flow.expiresAt) });
      if (!await commit(op)) throw new Error("flow state collision");
    },

    async getFlow(flowState) {
      const stored = await read<StoredFlow>([FLOW_KEY, sha256Base64Url(flowState)]);
      return stored && await openFlow(stored);
    },

    deleteFlow(flow) {
      return commit(atomic().check(flow).delete(flow.key));
    },

    saveFlowUpstreamTokens(flow, tokens) {
      return rewriteFlow(flow, { ...flow.value, upstreamTokens: tokens });
    },

    deferFlowPolling(flow, intervalSeconds, nextPollAt) {
      return rewriteFlow(flow, { ...flow.value, intervalSeconds, nextPollAt });
    },

    completeFlow(flow, { code, codeRecord, session }) {
      const codeKey = [CODE_KEY, sha256Base64Url(code)];
      const sessionKey = [SESSION_KEY, session.id];
      return commit(
        atomic()
          .check(flow)
          .check({ key: codeKey, versionstamp: null })
          .check({ key: sessionKey, versionstamp: null })
          .set(codeKey, codeRecord, { expireIn: ttlUntil(codeRecord.expiresAt) })
          .set(sessionKey, session, { expireIn: ttlUntil(session.expiresAt) })
          .delete(flow.key),
      );
    },

    getCode(code) {
      return read<CodeRecord>([CODE_KEY, sha256Base64Url(code)]);
    },

    async getCodeAndSession(codeValue) {
      const key = [CODE_KEY, sha256Base64Url(codeValue)];
      const sessionId = sessionIdOf(codeValue);
      const [found, stored] = await readWithNamedSession<CodeRecord>(key, sessionId);
      if (!found) return null;
      const named = stored && found.value.sessionId === sessionId ? stored : null;
      const session = named
        ? await liveSessionOf(named)
        : await readLiveSession(found.value.sessionId);
      return { code: found, session };
    },

    deleteCode(code) {
      return commit(atomic().check(code).delete(code.key));
    },

    async redeemCode(code, session, updated, options) {
      const op = atomic().check(code).check(session);
      if (options?.keepRedeemedMarker) {
        // Kept until the code would have expired, so a replay can be recognised.
        const marker: CodeRecord = { ...code.value, redeemedAt: clock.now() };
        op.set(code.key, marker, { expireIn: ttlUntil(code.value.expiresAt) });
      } else {
        op.delete(code.key);
      }
      await writeRotatedSession(op, session, updated);
      return commit(op);
    },

    getSession: readLiveSession,

    async findSessionByRefreshToken(refreshToken) {
      const sessionId = sessionIdOf(refreshToken);
      const session = sessionId ? await readLiveSession(sessionId) : null;
      return session?.value.mcpRefreshTokenHash === sha256Base64Url(refreshToken) ? session : null;
    },

    async rotateRefreshToken(session, updated, grace) {
      const op = atomic().check(session);
      await writeRotatedSession(op, session, updated, grace);
      return commit(op);
    },

    async takeRefreshGrace(refreshToken) {
      const sessionId = sessionIdOf(refreshToken);
      if (!sessionId) return null;
      const hash = sha256Base64Url(refreshToken);
      // Retried only when something else (a GitLab refresh by the gateway) saved the session
      // in between; a rotation or another taker ends the grace, which the next read sees.
      for (let attempt = 0; attempt < TAKE_GRACE_ATTEMPTS; attempt++) {
        const session = await readLiveSession(sessionId);
        const grace = session?.value.previousRefresh;
        if (!session || grace?.hash !== hash || clock.now() > grace.untilMs) return null;
        const response = await secrets.open(grace.sealedResponse).catch(() => null);
        if (response === null) return null;
        const { previousRefresh: _taken, ...rest } = session.value;
        const op = atomic().check(session)
          .set(session.key, await resealedIfRetired(rest), { expireIn: ttlUntil(rest.expiresAt) });
        if (await commit(op)) return response;
      }
      return null;
    },

    async saveSession(session, updated) {
      const stored = await resealedIfRetired(updated);
      const result = await atomic().check(session)
        .set(session.key, stored, { expireIn: ttlUntil(updated.expiresAt) })
        .commit();
      return result.ok
        ? { key: session.key, value: stored, versionstamp: result.versionstamp }
        : null;
    },

    async deleteSession(id) {
      // A rotation that read the session before this delete fails its versionstamp check.
      await commit(atomic().delete([SESSION_KEY, id]));
    },

    sealGitLabTokens({ accessToken, refreshToken }) {
      return secrets.seal(JSON.stringify({ accessToken, refreshToken }));
    },

    openGitLabTokens(session) {
      return openSealed<GitLabTokens>(session.sealedGitLabTokens);
    },

    async ping() {
      await read([LEASE_KEY, "health"]);
    },

    async registerClient(client) {
      const key = [CLIENT_KEY, client.clientId];
      if (!await commit(atomic().check({ key, versionstamp: null }).set(key, client))) {
        throw new Error("client id collision");
      }
    },

    async getClient(clientId) {
      // Any client_id reaches here; KV refuses keys over ~2 KiB (a TypeError, so a 500), and
      // the ids we issue are short, so a long one is simply unknown.
      if (clientId.length > MAX_CLIENT_ID_LENGTH) return null;
      return (await read<ClientRecord>([CLIENT_KEY, clientId]))?.value ?? null;
    },

    async countRequest(bucket, ip, limit, windowMs) {
      const window = Math.floor(clock.now() / windowMs);
      const key = [RATE_KEY, bucket, ip, window];
      const expireIn = (window + 1) * windowMs - clock.now() + 1000;
      // A lost race means another request was counted (only counting writes this key), so the
      // count read next is higher: at most `limit` conflicts before the answer is "over". A
      // fixed small number of attempts would refuse a parallel burst far below the limit.
      for (let attempt = 0; attempt < limit + RATE_COUNT_ATTEMPTS; attempt++) {
        const current = await read<number>(key);
        const count = (current?.value ?? 0) + 1;
        if (count > limit) return count;
        const op = atomic()
          .check({ key, versionstamp: current?.versionstamp ?? null })
          .set(key, count, { expireIn });
        if (await commit(op)) return count;
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 2));
      }
      return limit + 1;
    },

    tryLeaseFlow(flow, ttlMs) {
      return this.tryLease(FLOW_KEY, String(flow.key[1]), ttlMs);
    },

    async tryLease(kind, id, ttlMs) {
      const key = [LEASE_KEY, kind, id];
      const current = await read<{ expiresAt: number }>(key);
      if (current && isLive(current.value)) return null;
      const expiresAt = clock.now() + ttlMs;
      const result = await atomic()
        .check({ key, versionstamp: current?.versionstamp ?? null })
        .set(key, { expiresAt }, { expireIn: ttlMs })
        .commit();
      if (!result.ok) return null;
      const held = { key, versionstamp: result.versionstamp };
      return {
        async release() {
          await commit(atomic().check(held).delete(key));
        },
      };
    },
  };
}

/** An entry that exists, as a Versioned record; null for an absent one. */
function versioned<T>(entry: Deno.KvEntryMaybe<T>): Versioned<T> | null {
  return entry.versionstamp === null
    ? null
    : { key: entry.key, value: entry.value, versionstamp: entry.versionstamp };
}

const LOCKED_RETRIES = 8;

/**
 * Several processes on one SQLite-backed KV file see transient "database is locked" errors;
 * they are retried with backoff instead of surfacing as 500s.
 */
async function retryLocked<T>(operation: () => Promise<T>): Promise<T> {
  for (let attempt = 0;; attempt++) {
    try {
      return await operation();
    } catch (error) {
      if (attempt >= LOCKED_RETRIES || !/database is locked|busy/i.test(String(error))) throw error;
      await new Promise((resolve) => setTimeout(resolve, 5 * 2 ** attempt * Math.random() + 1));
    }
  }
}
