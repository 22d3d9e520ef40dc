/**
 * Recent `/authorize` requests, by the hash of the whole request: a second identical request
 * within the window (a double redirect, a prefetch, a reload) shows the flow the first one
 * started instead of starting another at the upstream. The flow state is sealed at rest.
 */

import type { SecretBox } from "../secret_box.ts";
import type { StoreIo, Versioned } from "./io.ts";
import { repeatKey } from "./keys.ts";

/** The flow a recent `/authorize` request started, or is starting. */
export interface RepeatRecord {
  flowState: string;
  /** False while the first request is still starting the flow at the upstream. */
  started: boolean;
  /** Epoch ms the first request claimed it. */
  claimedAt: number;
  /** Epoch ms: the end of the window in which identical requests share the flow. */
  expiresAt: number;
}

/** What is stored for a request: the live record, and what a claim must replace. */
export interface RepeatLookup {
  /** The live record, opened; null when absent, expired, or sealed under a key we no longer hold. */
  live: Versioned<RepeatRecord> | null;
  /** The versionstamp of whatever is stored, live or not (null: nothing). */
  versionstamp: string | null;
}

/** The repeated-authorization operations of the store. */
export interface RepeatStore {
  /** The record of an identical recent request. */
  getRepeat(requestHash: string): Promise<RepeatLookup>;
  /**
   * Claims `requestHash` for a flow about to start, replacing what was stored at `versionstamp`
   * (null: nothing); null when another request changed the record first.
   */
  claimRepeat(
    requestHash: string,
    versionstamp: string | null,
    record: RepeatRecord,
  ): Promise<Versioned<RepeatRecord> | null>;
  /** Marks a claimed record's flow as started (stored and showable). */
  markRepeatStarted(claim: Versioned<RepeatRecord>): Promise<void>;
  /** Forgets a claim whose flow could not be started. */
  dropRepeat(claim: Versioned<RepeatRecord>): Promise<void>;
}

type StoredRepeat = Omit<RepeatRecord, "flowState"> & { sealed: string };

/** Repeat records over the shared KV access and the box that seals flow states at rest. */
export function createRepeatStore(io: StoreIo, secrets: SecretBox): RepeatStore {
  async function write(
    key: Deno.KvKey,
    versionstamp: string | null,
    record: RepeatRecord,
  ): Promise<Versioned<RepeatRecord> | null> {
    const { flowState, ...rest } = record;
    const stored: StoredRepeat = { ...rest, sealed: await secrets.seal(flowState) };
    const result = await io.atomic()
      .check({ key, versionstamp })
      .set(key, stored, { expireIn: io.ttlUntil(record.expiresAt) })
      .commit();
    return result.ok ? { key, value: record, versionstamp: result.versionstamp } : null;
  }

  return {
    async getRepeat(requestHash) {
      const stored = await io.read<StoredRepeat>(repeatKey(requestHash));
      if (!stored) return { live: null, versionstamp: null };
      const { versionstamp } = stored;
      // Deno deletes an expired entry only some time later: it is still there to replace.
      if (!io.isLive(stored.value)) return { live: null, versionstamp };
      const { sealed, ...rest } = stored.value;
      try {
        const value = { ...rest, flowState: await secrets.open(sealed) };
        return { live: { ...stored, value }, versionstamp };
      } catch {
        // Sealed under a key we no longer hold: as if expired.
        return { live: null, versionstamp };
      }
    },

    claimRepeat(requestHash, versionstamp, record) {
      return write(repeatKey(requestHash), versionstamp, record);
    },

    async markRepeatStarted(claim) {
      await write(claim.key, claim.versionstamp, { ...claim.value, started: true });
    },

    async dropRepeat(claim) {
      await io.commit(io.atomic().check(claim).delete(claim.key));
    },
  };
}
