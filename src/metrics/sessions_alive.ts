/**
 * The `sessions_alive` gauge's value: counting sessions is a scan of the store, so a scrape
 * counts only when the last count is a minute old (by the injected clock), and scrapes that
 * arrive during a count share it. A failed count leaves the last value shown and is tried again
 * at the next scrape.
 */

import type { Clock } from "../clock.ts";

/** How long a count stands. */
export const SESSIONS_COUNT_TTL_MS = 60_000;

/** The gauge's reader. */
export interface SessionsAlive {
  /** The count, recounted when older than a minute; undefined before any count succeeded. */
  read(): Promise<number | undefined>;
}

export function createSessionsAlive(
  { clock, countLiveSessions }: { clock: Clock; countLiveSessions(): Promise<number> },
): SessionsAlive {
  let last: { value: number; at: number } | undefined;
  let counting: Promise<number | undefined> | undefined;

  async function recount(): Promise<number | undefined> {
    try {
      const value = await countLiveSessions();
      last = { value, at: clock.now() };
      return value;
    } catch {
      return last?.value;
    } finally {
      counting = undefined;
    }
  }

  return {
    read() {
      if (last && clock.now() - last.at < SESSIONS_COUNT_TTL_MS) {
        return Promise.resolve(last.value);
      }
      return counting ??= recount();
    },
  };
}
