/**
 * Authorization-code records: single use, keyed by the code's hash, each naming the session
 * its sign-in created, so code and session come back in one read.
 */

import type { StoreIo, Versioned } from "./io.ts";
import { codeKey, sessionKey, unredeemedKey } from "./keys.ts";
import type { CodeRecord, SessionRecord } from "./records.ts";
import { sessionIdOf } from "./session_tokens.ts";
import type { SessionRecords } from "./sessions.ts";

/** A code as read, and its session (null when that is gone). */
export interface CodeAndSession {
  code: Versioned<CodeRecord>;
  session: Versioned<SessionRecord> | null;
}

/** The authorization-code operations of the store. */
export interface CodeStore {
  /** The code, even past its `expiresAt`, or null. */
  getCode(code: string): Promise<Versioned<CodeRecord> | null>;
  /** The code (as getCode) and the live session it was issued for, read together. */
  getCodeAndSession(code: string): Promise<CodeAndSession | null>;
  deleteCode(code: Versioned<CodeRecord>): Promise<boolean>;
  /**
   * Consumes the code (and its unredeemed sign-in) and stores the session with its first
   * refresh token, all or nothing;
   * false when the code or session changed since read (someone else redeemed it).
   */
  redeemCode(
    code: Versioned<CodeRecord>,
    session: Versioned<SessionRecord>,
    updated: SessionRecord,
    options?: { keepRedeemedMarker?: boolean },
  ): Promise<boolean>;
}

/** Code records over the shared KV access and the session records they name. */
export function createCodeStore(io: StoreIo, sessions: SessionRecords): CodeStore {
  /** The code, and the session it names read in the same round trip when it names one. */
  async function readCodeWithNamedSession(
    code: string,
  ): Promise<[Versioned<CodeRecord> | null, Versioned<SessionRecord> | null, string | undefined]> {
    const sessionId = sessionIdOf(code);
    if (!sessionId) return [await io.read<CodeRecord>(codeKey(code)), null, undefined];
    const [found, session] = await io.readMany([codeKey(code), sessionKey(sessionId)]);
    return [
      found as Versioned<CodeRecord> | null,
      sessions.fromStored(session as Versioned<SessionRecord> | null),
      sessionId,
    ];
  }

  return {
    getCode(code) {
      return io.read<CodeRecord>(codeKey(code));
    },

    async getCodeAndSession(codeValue) {
      const [found, stored, sessionId] = await readCodeWithNamedSession(codeValue);
      if (!found) return null;
      const named = stored && found.value.sessionId === sessionId ? stored : null;
      const session = named
        ? await sessions.liveSessionOf(named)
        : await sessions.getSession(found.value.sessionId);
      return { code: found, session };
    },

    deleteCode(code) {
      return io.commit(io.atomic().check(code).delete(code.key));
    },

    async redeemCode(code, session, updated, options) {
      const op = io.atomic().check(code).check(session)
        .delete(unredeemedKey(code.value.expiresAt, code.value.sessionId));
      if (options?.keepRedeemedMarker) {
        // Kept until the code would have expired, so a replay can be recognised.
        const marker: CodeRecord = { ...code.value, redeemedAt: io.clock.now() };
        op.set(code.key, marker, { expireIn: io.ttlUntil(code.value.expiresAt) });
      } else {
        op.delete(code.key);
      }
      await sessions.writeRotated(op, session, updated);
      return io.commit(op);
    },
  };
}
