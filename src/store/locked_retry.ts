/**
 * Several processes (or `deno serve --parallel` workers) on one SQLite-backed KV file take turns
 * at writing it, and SQLite answers "database is locked" to the one that finds the file taken.
 * Such an operation is tried again after a short random pause, for at most a bounded time, so
 * that a client never sees the lock. The pause stays near what one commit of another process
 * takes (about a millisecond here): a pause that doubled without a cap (as this did before)
 * sent a few requests to sleep for hundreds of milliseconds.
 */

/** How long an operation may keep meeting the lock before its error is the caller's. */
export const LOCKED_RETRY_BUDGET_MS = 2000;
/** The longest pause between two tries. */
const MAX_PAUSE_MS = 4;

/** Runs `operation`, trying it again while SQLite says the database is locked. */
export async function retryLocked<T>(
  operation: () => Promise<T>,
  budgetMs = LOCKED_RETRY_BUDGET_MS,
  pause: (ms: number) => Promise<void> = sleep,
): Promise<T> {
  const giveUpAt = Date.now() + budgetMs;
  for (let attempt = 0;; attempt++) {
    try {
      return await operation();
    } catch (error) {
      if (!isLocked(error) || Date.now() >= giveUpAt) throw error;
      await pause(Math.min(MAX_PAUSE_MS, 2 ** attempt) * Math.random() + 0.5);
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether `error` is SQLite's "database is locked" (or busy). */
export function isLocked(error: unknown): boolean {
  return /database is locked|busy/i.test(String(error));
}
