/**
 * Sessions that expired idle (SESSION_IDLE_TTL without a refresh) still hold a GitLab token
 * nobody will use again: the idle index finds them, so a sweep revokes it before the store
 * drops the record. Each redeemed session has one entry, under the day its expiry falls in; a
 * write moves it (in the session's own commit) only when that day changes, so most refreshes
 * write the session alone. A day that ended holds only expired sessions: a key range to take.
 * An indexed session outlives its expiry in the store by 8 days for the sweep (every read treats
 * it as gone past `expiresAt`); one never indexed is dropped at its expiry, as before.
 */

import type { AtomicWrite } from "./group_commit.ts";
import type { StoreIo, Versioned } from "./io.ts";
import { idleSessionKey, idleSessionRange, sessionKey } from "./keys.ts";
import { type IdleSessionEntry, sessionFromStored, type SessionRecord } from "./records.ts";
import { takeEach, type Taken } from "./takes.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

/** How long after its day an idle session waits for a sweep before the store drops it. */
export const IDLE_SWEEP_KEEP_MS = 7 * DAY_MS;

/** The day (since the epoch) an expiry falls in: the session's idle index entry. */
export function idleDayOf(expiresAt: number): number {
  return Math.floor(expiresAt / DAY_MS);
}

/** When an index entry is dropped: a week after its day ends. */
function keptUntil(day: number): number {
  return (day + 1) * DAY_MS + IDLE_SWEEP_KEEP_MS;
}

/**
 * When an indexed session is dropped: no sooner than its entry. It moves with each write, as
 * the expiry itself does: the day's end for every session of a day made the refresh commit's
 * time in Deno KV's thread measurably longer (bench: ~77 µs instead of ~60).
 */
function sessionKeptUntil(expiresAt: number): number {
  return expiresAt + DAY_MS + IDLE_SWEEP_KEEP_MS;
}

/**
 * Adds to `op` what moves the session's idle index entry from `previous` (as stored) to the day
 * of `updated`'s expiry: nothing when that day has not changed. Answers `updated` as it is to be
 * stored (naming its entry's day), and the `expireIn` to store it with.
 */
export function withIdleIndex(
  io: StoreIo,
  op: AtomicWrite,
  previous: Pick<SessionRecord, "idleDay">,
  updated: SessionRecord,
): { value: SessionRecord; expireIn: number } {
  const day = idleDayOf(updated.expiresAt);
  const value: SessionRecord = { ...updated, idleDay: day };
  const expireIn = io.ttlUntil(sessionKeptUntil(updated.expiresAt));
  if (previous.idleDay === day) return { value, expireIn };
  if (previous.idleDay !== undefined) op.delete(idleSessionKey(previous.idleDay, updated.id));
  const entry: IdleSessionEntry = { sessionId: updated.id };
  op.set(idleSessionKey(day, updated.id), entry, { expireIn: io.ttlUntil(keptUntil(day)) });
  return { value, expireIn };
}

/** Adds to `op` the deletion of the session's idle index entry, if it has one. */
export function withoutIdleIndex(op: AtomicWrite, session: SessionRecord): AtomicWrite {
  return session.idleDay === undefined
    ? op
    : op.delete(idleSessionKey(session.idleDay, session.id));
}

/** The idle session operations of the store. */
export interface IdleSessionStore {
  /**
   * Deletes up to `limit` sessions that expired idle, each with its index entry, and answers
   * those this call deleted (a concurrent sweep gets the others), with the GitLab tokens they
   * held, even when taking others failed: a session deleted and not answered would keep its
   * GitLab token, its entry gone. Entries whose session ended otherwise are dropped on the way.
   */
  takeIdleSessions(limit: number): Promise<Taken<SessionRecord>>;
}

/** Idle sessions over the shared KV access. */
export function createIdleSessionStore(io: StoreIo): IdleSessionStore {
  async function take(entry: Versioned<IdleSessionEntry>): Promise<SessionRecord | null> {
    const day = entry.key[1];
    const stored = await io.read<SessionRecord>(sessionKey(entry.value.sessionId));
    if (!stored || stored.value.idleDay !== day || io.isLive(stored.value)) {
      // Ended otherwise (signed out, revoked), or moved on: only the entry is left to drop. So
      // too for a session still live: renewed by an instance that keeps no index (a rolling
      // upgrade), its next write indexes it again, under its own day.
      await io.commit(io.atomic().check(entry).delete(entry.key));
      return null;
    }
    const op = io.atomic().check(entry).check(stored).delete(entry.key).delete(stored.key);
    return await io.commit(op) ? sessionFromStored(stored.value) : null;
  }

  return {
    async takeIdleSessions(limit) {
      const range = idleSessionRange(idleDayOf(io.clock.now()));
      return takeEach(await io.listRange<IdleSessionEntry>(range, limit), take);
    },
  };
}
