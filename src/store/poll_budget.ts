/**
 * The GitLab poll budget's state, shared by every instance: the polls spent in each one-second
 * window (and by which client prefix), the prefixes that asked lately (their number sets each
 * one's fair share), and the cut after GitLab's 429. The policy lives in sign_in/poll_budget.ts;
 * here one poll's decision is read and written in one versionstamp-checked commit.
 */

import type { StoreIo } from "./io.ts";
import { activePrefixesKey, budgetCutKey, pollWindowKey } from "./keys.ts";

/** The polls spent in one one-second window. */
export interface PollWindow {
  spent: number;
  /** Polls spent per client prefix. */
  byPrefix: Record<string, number>;
}

/** The client prefixes that asked for a GitLab poll lately: epoch ms of their last asking. */
export interface ActivePrefixes {
  lastAskedAt: Record<string, number>;
}

/** The budget as cut after GitLab's 429: `to` polls a second from `since`, recovering after. */
export interface BudgetCut {
  to: number;
  /** Epoch ms: the end of the pause the 429 imposed. */
  since: number;
  /** Epoch ms when the budget has recovered in full (the record's end). */
  expiresAt: number;
}

/** What one poll's decision sees. */
export interface PollBudgetState {
  window: PollWindow;
  active: ActivePrefixes;
  cut: BudgetCut | null;
}

/** One poll's decision: whether it may go, and what it changes (absent: unchanged). */
export interface PollDecision {
  allowed: boolean;
  window?: PollWindow;
  active?: ActivePrefixes;
}

/** The poll-budget operations of the store. */
export interface PollBudgetStore {
  /**
   * Decides one poll in the window of `second` with `decide` and writes what it changes, all
   * or nothing; on a lost race (another poll decided meanwhile) decides again, at most
   * `attempts` times, then refuses.
   */
  decidePoll(
    second: number,
    decide: (state: PollBudgetState) => PollDecision,
    attempts: number,
  ): Promise<boolean>;
  /** Replaces the budget's cut with what `cut` makes of the current one (null: leave it). */
  cutPollBudget(cut: (current: BudgetCut | null) => BudgetCut | null): Promise<void>;
}

/** How long window and active-prefix records are kept (GC only: readers judge their age). */
const BUDGET_RECORD_KEEP_MS = 60_000;
const CUT_WRITE_ATTEMPTS = 5;

/** The poll budget over the shared KV access. */
export function createPollBudgetStore(io: StoreIo): PollBudgetStore {
  const activeKey = activePrefixesKey();
  const cutKey = budgetCutKey();
  return {
    async decidePoll(second, decide, attempts) {
      const windowKey = pollWindowKey(second);
      for (let attempt = 0; attempt < attempts; attempt++) {
        const [window, active, cut] = await io.readMany([windowKey, activeKey, cutKey]);
        const liveCut = cut && io.isLive(cut.value as BudgetCut) ? cut.value as BudgetCut : null;
        const decision = decide({
          window: (window?.value as PollWindow | undefined) ?? { spent: 0, byPrefix: {} },
          active: (active?.value as ActivePrefixes | undefined) ?? { lastAskedAt: {} },
          cut: liveCut,
        });
        if (!decision.window && !decision.active) return decision.allowed;
        const op = io.atomic();
        if (decision.window) {
          op.check({ key: windowKey, versionstamp: window?.versionstamp ?? null })
            .set(windowKey, decision.window, { expireIn: BUDGET_RECORD_KEEP_MS });
        }
        if (decision.active) {
          op.check({ key: activeKey, versionstamp: active?.versionstamp ?? null })
            .set(activeKey, decision.active, { expireIn: BUDGET_RECORD_KEEP_MS });
        }
        if (await io.commit(op)) return decision.allowed;
      }
      return false;
    },

    async cutPollBudget(cut) {
      for (let attempt = 0; attempt < CUT_WRITE_ATTEMPTS; attempt++) {
        const current = await io.read<BudgetCut>(cutKey);
        const next = cut(current && io.isLive(current.value) ? current.value : null);
        if (!next) return;
        const op = io.atomic()
          .check({ key: cutKey, versionstamp: current?.versionstamp ?? null })
          .set(cutKey, next, { expireIn: io.ttlUntil(next.expiresAt) });
        if (await io.commit(op)) return;
      }
    },
  };
}
