/**
 * The sessions the operator's CLI ended, brought into this process's `revocations_total`: the
 * CLI counts them in the store, and a scrape takes that count (at most every
 * OPERATOR_COUNT_TTL_MS by the injected clock, so scrapes in a burst cost one store read).
 * A failed take leaves the count in the store for the next one.
 */

import type { Clock } from "../clock.ts";

/** How long after a take the next scrape takes again. */
export const OPERATOR_COUNT_TTL_MS = 5_000;

/** The take done at a scrape. */
export interface OperatorRevocations {
  /** Takes the store's count, unless taken within OPERATOR_COUNT_TTL_MS, and adds it. */
  take(): Promise<void>;
}

export function createOperatorRevocations(
  { clock, takeOperatorRevocations }: { clock: Clock; takeOperatorRevocations(): Promise<number> },
  add: (sessions: number) => void,
): OperatorRevocations {
  let takenAt = Number.NEGATIVE_INFINITY;
  let taking: Promise<void> | undefined;

  async function takeNow(): Promise<void> {
    try {
      const sessions = await takeOperatorRevocations();
      takenAt = clock.now();
      if (sessions > 0) add(sessions);
    } catch {
      // Still in the store: the next scrape takes it.
    } finally {
      taking = undefined;
    }
  }

  return {
    take() {
      if (clock.now() - takenAt < OPERATOR_COUNT_TTL_MS) return Promise.resolve();
      return taking ??= takeNow();
    },
  };
}
