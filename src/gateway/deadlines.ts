/**
 * Time limits for many concurrent waits with few timers. A timer per request costs the gateway
 * more than the rest of its own work on a busy MCP server (two timer operations per call, and
 * the event loop keeps every one of them), so deadlines are rounded up to a tick and all waits
 * ending in the same tick share one timer. A wait is aborted at its limit plus at most one tick.
 */

/** A started wait: its signal aborts when the limit has passed; `done()` when it ended first. */
export interface Deadline {
  signal: AbortSignal;
  /**
   * Runs `expired` when the limit passes (at once when it has passed), unless `done()` came
   * first; a later call replaces it. Cheaper than a listener on `signal`: an `EventTarget`
   * listener added and removed per request cost the gateway about 5% of its CPU.
   */
  whenExpired(expired: () => void): void;
  /** The wait is over: nothing aborts it any more, and its timer goes when its tick is empty. */
  done(): void;
}

/** Starts waits with one time limit. */
export interface Deadlines {
  /** The time limit of every wait, in milliseconds. */
  readonly limitMs: number;
  start(): Deadline;
}

/** The longest a wait may overrun its limit: a tenth of the limit, at most this. */
const MAX_TICK_MS = 100;

interface Wait {
  controller: AbortController;
  expired?: () => void;
}

interface Tick {
  timer: unknown;
  waits: Set<Wait>;
}

/** The clock and timers deadlines run on; tests inject their own. */
export interface Timers {
  now(): number;
  setTimeout(run: () => void, ms: number): unknown;
  clearTimeout(timer: unknown): void;
}

/** The process's clock and timers. */
export const SYSTEM_TIMERS: Timers = {
  now: () => Date.now(),
  setTimeout: (run, ms) => setTimeout(run, ms),
  clearTimeout: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
};

/** Waits limited to `limitMs` each, aborted with a TimeoutError like `AbortSignal.timeout`. */
export function createDeadlines(limitMs: number, timers: Timers = SYSTEM_TIMERS): Deadlines {
  const tickMs = Math.max(1, Math.min(MAX_TICK_MS, Math.floor(limitMs / 10)));
  const ticks = new Map<number, Tick>();

  function expire(tick: number): void {
    const entry = ticks.get(tick);
    ticks.delete(tick);
    for (const wait of entry?.waits ?? []) {
      wait.controller.abort(new DOMException("The time limit was reached", "TimeoutError"));
      wait.expired?.();
    }
  }

  return {
    limitMs,
    start() {
      const wait: Wait = { controller: new AbortController() };
      const tick = Math.ceil((timers.now() + limitMs) / tickMs) * tickMs;
      let entry = ticks.get(tick);
      if (!entry) {
        entry = {
          timer: timers.setTimeout(() => expire(tick), tick - timers.now()),
          waits: new Set(),
        };
        ticks.set(tick, entry);
      }
      const waits = entry.waits.add(wait);
      const timer = entry.timer;
      return {
        signal: wait.controller.signal,
        whenExpired(expired) {
          if (wait.controller.signal.aborted) expired();
          else if (waits.has(wait)) wait.expired = expired;
        },
        done() {
          if (!waits.delete(wait) || waits.size > 0) return;
          timers.clearTimeout(timer);
          if (ticks.get(tick)?.waits === waits) ticks.delete(tick);
        },
      };
    },
  };
}
