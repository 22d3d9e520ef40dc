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

/** The repeated-authorization operations of the store. */
export interface RepeatStore {
  /** The live record of an identical recent request, or null. */
  getRepeat(requestHash: string): Promise<Versioned<RepeatRecord> | null>;
  /**
   * Claims `requestHash` for a flow about to start, replacing `previous` (as read) when given;
   * null when another request changed the record first.
   */
  claimRepeat(
    requestHash: string,
    previous: Versioned<RepeatRecord> | null,
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
      if (!stored || !io.isLive(stored.value)) return null;
      const { sealed, ...rest } = stored.value;
      try {
        return { ...stored, value: { ...rest, flowState: await secrets.open(sealed) } };
      } catch {
        // Sealed under a key we no longer hold: as if absent.
        return null;
      }
    },

    claimRepeat(requestHash, previous, record) {
      return write(repeatKey(requestHash), previous?.versionstamp ?? null, record);
    },

    async markRepeatStarted(claim) {
      await write(claim.key, claim.versionstamp, { ...claim.value, started: true });
    },

    async dropRepeat(claim) {
      await io.commit(io.atomic().check(claim).delete(claim.key));
    },
  };
}
