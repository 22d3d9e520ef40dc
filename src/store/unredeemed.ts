/**
 * Sign-ins whose authorization code was never redeemed. Completing a device flow stores one
 * beside the code and the session; redeeming the code deletes it in the same commit. One still
 * there after its code expired is abandoned: taking it deletes it and its session, and hands
 * back the sealed GitLab tokens for a best-effort revocation. So does a device flow that expired
 * holding a GitLab token it never handed to a session (issue 33 §1.9).
 */

import type { StoreIo, Versioned } from "./io.ts";
import { abandonedSignInRange, sessionKey, strandedTokensRange } from "./keys.ts";
import type { StrandedTokens, UnredeemedSignIn } from "./records.ts";
import { takeEach, type Taken } from "./takes.ts";

/**
 * How long an abandoned sign-in waits for a sweep before KV collects it unrevoked (GitLab
 * refresh tokens do not expire on their own, so a sweep is worth waiting for).
 */
export const UNREDEEMED_KEEP_MS = 7 * 24 * 60 * 60 * 1000;

/** The unredeemed sign-in operations of the store. */
export interface UnredeemedStore {
  /**
   * Deletes up to `limit` sign-ins whose code expired unredeemed, and their sessions; answers
   * those this call deleted (a concurrent sweep gets the others), even when taking others failed.
   */
  takeAbandonedSignIns(limit: number): Promise<Taken<UnredeemedSignIn>>;
  /**
   * Deletes up to `limit` tokens of device flows that expired before completing; answers those
   * this call deleted, even when taking others failed.
   */
  takeStrandedTokens(limit: number): Promise<Taken<StrandedTokens>>;
}

/** Unredeemed sign-ins over the shared KV access. */
export function createUnredeemedStore(io: StoreIo): UnredeemedStore {
  async function take(entry: Versioned<UnredeemedSignIn>): Promise<UnredeemedSignIn | null> {
    const op = io.atomic().check(entry).delete(entry.key)
      .delete(sessionKey(entry.value.sessionId));
    return await io.commit(op) ? entry.value : null;
  }

  return {
    async takeAbandonedSignIns(limit) {
      const range = abandonedSignInRange(io.clock.now());
      return takeEach(await io.listRange<UnredeemedSignIn>(range, limit), take);
    },
    async takeStrandedTokens(limit) {
      const range = strandedTokensRange(io.clock.now());
      return takeEach(
        await io.listRange<StrandedTokens>(range, limit),
        async (entry) =>
          await io.commit(io.atomic().check(entry).delete(entry.key)) ? entry.value : null,
      );
    },
  };
}
