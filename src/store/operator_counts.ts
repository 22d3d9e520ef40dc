/**
 * Counts the operator's CLI leaves for the service's metrics: the CLI is another process on the
 * same store, so what it did reaches `revocations_total` through one stored number. The CLI adds
 * to it; a service process takes it whole at a scrape (setting it back to 0 in the same commit)
 * and adds it to its own counter, so each revocation is counted by exactly one process and
 * `sum()` over the processes stays right.
 */

import type { StoreIo } from "./io.ts";
import { operatorRevocationsKey } from "./keys.ts";

/** The operator-count operations of the store. */
export interface OperatorCountStore {
  /** Adds `sessions` ended by the operator's CLI to the count the service has not taken yet. */
  countOperatorRevocations(sessions: number): Promise<void>;
  /** Takes the operator's revocations counted since the last take (0 when none). */
  takeOperatorRevocations(): Promise<number>;
}

/** A count no process takes (metrics off) is forgotten after this long. */
const COUNT_LIFETIME_MS = 30 * 24 * 3600 * 1000;
/** Attempts per change: each lost race means another process changed the count meanwhile. */
const COUNT_ATTEMPTS = 20;

/** The operator counts over the shared KV access. */
export function createOperatorCountStore(io: StoreIo): OperatorCountStore {
  const key = operatorRevocationsKey();
  const change = async (next: (count: number) => number | undefined): Promise<number> => {
    for (let attempt = 0; attempt < COUNT_ATTEMPTS; attempt++) {
      const current = await io.read<number>(key);
      const count = current?.value ?? 0;
      const value = next(count);
      if (value === undefined) return count;
      const op = io.atomic()
        .check({ key, versionstamp: current?.versionstamp ?? null })
        .set(key, value, { expireIn: COUNT_LIFETIME_MS });
      if (await io.commit(op)) return count;
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 2));
    }
    throw new Error("the operator count kept changing under this process");
  };
  return {
    async countOperatorRevocations(sessions) {
      if (sessions > 0) await change((count) => count + sessions);
    },
    takeOperatorRevocations: () => change((count) => count === 0 ? undefined : 0),
  };
}
