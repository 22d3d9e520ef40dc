/**
 * The database's deadline (DATABASE_TIMEOUT_MS). A database that hangs (stopped, partitioned,
 * a pool whose connections never answer) must not hang the requests that need it: each
 * request gets one budget of database time, and every store operation it awaits is raced
 * against what is left of it, waiting for a connection, connecting and the statement included.
 * When the budget runs out the operation is answered StoreUnavailableError (rendered once, as
 * 503 with `Retry-After`, by the app), whatever the driver is still doing.
 *
 * The budget counts the time the request spends waiting for the database (operations that
 * overlap count once), not the time it waits for GitLab or the MCP server, which have limits of
 * their own: a slow GitLab must not turn a healthy database's write into a 503. A request that
 * needs only the store therefore has its answer within the budget of its arrival.
 *
 * The request is found through AsyncLocalStorage, so that no store signature carries it; an
 * operation outside any request (a background timer, the library guard, the operator's tools)
 * gets a budget of its own. An operation that gave up is also withdrawn from the group read or
 * commit queue it may still wait in (serial_batches.ts), so a write answered 503 before it was
 * sent is never applied, and a database that comes back is not first fed a stale backlog. A
 * write that was sent when its caller gave up commits or not, as a whole: an answer lost.
 */

import { AsyncLocalStorage } from "node:async_hooks";
import { StoreUnavailableError } from "./backend.ts";
import { Caller } from "./serial_batches.ts";

/** DATABASE_TIMEOUT_MS's default. */
export const DEFAULT_DATABASE_TIMEOUT_MS = 5_000;

/** The clock and timers budgets run on (the process's; tests inject their own). */
export interface DeadlineTimers {
  now(): number;
  setTimeout(run: () => void, ms: number): unknown;
  clearTimeout(timer: unknown): void;
}

const SYSTEM_TIMERS: DeadlineTimers = {
  now: () => performance.now(),
  setTimeout: (run, ms) => setTimeout(run, ms),
  clearTimeout: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
};

/** The budgets of one store. */
export interface StoreDeadline {
  /** Runs one request's `work`: every store operation it awaits draws on one budget. */
  run<T>(work: () => Promise<T>): Promise<T>;
  /**
   * Runs `operation` within the current request's budget (or one of its own outside any); its
   * caller gives up when the budget ran out and was answered StoreUnavailableError.
   */
  bound<T>(operation: (caller: Caller) => Promise<T>): Promise<T>;
}

/** Database time left to one request: overlapping operations count once. */
class Budget {
  #spentMs = 0;
  #inFlight = 0;
  #busySince = 0;
  /** Set when the request's answer is ready: later operations (a stream's) get their own. */
  ended = false;

  constructor(private readonly limitMs: number) {}

  leftMs(now: number): number {
    const running = this.#inFlight > 0 ? now - this.#busySince : 0;
    return this.limitMs - this.#spentMs - running;
  }

  begin(now: number): void {
    if (this.#inFlight++ === 0) this.#busySince = now;
  }

  end(now: number): void {
    if (--this.#inFlight === 0) this.#spentMs += now - this.#busySince;
  }
}

/** Budgets of `limitMs` of database time per request. */
export function createStoreDeadline(
  limitMs: number = DEFAULT_DATABASE_TIMEOUT_MS,
  timers: DeadlineTimers = SYSTEM_TIMERS,
): StoreDeadline {
  const current = new AsyncLocalStorage<Budget>();
  const alarms = new Alarms(timers);
  const budgetNow = (): Budget => {
    const budget = current.getStore();
    return budget && !budget.ended ? budget : new Budget(limitMs);
  };
  return {
    async run(work) {
      const budget = new Budget(limitMs);
      try {
        return await current.run(budget, work);
      } finally {
        budget.ended = true;
      }
    },
    bound(operation) {
      return race(budgetNow(), limitMs, alarms, operation);
    },
  };
}

/** An operation in flight: when its budget runs out, and what then. */
interface Alarm {
  atMs: number;
  expire(): void;
}

/**
 * One timer for every operation in flight, armed for the earliest of their limits. A timer set
 * and cleared per operation (two per refresh) cost the refresh grant about 5% of its CPU; here a
 * new operation arms the timer only when its limit comes before the armed one (a request that
 * has spent part of its budget), and the timer goes when no operation is left in flight, so it
 * never keeps an idle process alive. Each operation still expires at its own limit, exactly.
 */
class Alarms {
  readonly #pending = new Set<Alarm>();
  #timer: unknown;
  #armedAtMs = Infinity;

  constructor(readonly timers: DeadlineTimers) {}

  add(alarm: Alarm): void {
    this.#pending.add(alarm);
    if (alarm.atMs < this.#armedAtMs) this.#arm(alarm.atMs);
  }

  remove(alarm: Alarm): void {
    if (!this.#pending.delete(alarm) || this.#pending.size > 0) return;
    this.timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedAtMs = Infinity;
  }

  #arm(atMs: number): void {
    if (this.#timer !== undefined) this.timers.clearTimeout(this.#timer);
    this.#armedAtMs = atMs;
    this.#timer = this.timers.setTimeout(() => this.#ring(), atMs - this.timers.now());
  }

  /** Expires every operation whose limit has come, and arms for the next. */
  #ring(): void {
    this.#timer = undefined;
    this.#armedAtMs = Infinity;
    const now = this.timers.now();
    let nextMs = Infinity;
    for (const alarm of this.#pending) {
      if (alarm.atMs <= now) {
        this.#pending.delete(alarm);
        alarm.expire();
      } else if (alarm.atMs < nextMs) nextMs = alarm.atMs;
    }
    if (nextMs < Infinity) this.#arm(nextMs);
  }
}

function race<T>(
  budget: Budget,
  limitMs: number,
  alarms: Alarms,
  operation: (caller: Caller) => Promise<T>,
): Promise<T> {
  const { timers } = alarms;
  const started = timers.now();
  const leftMs = budget.leftMs(started);
  if (leftMs <= 0) return Promise.reject(timedOut(limitMs));
  const caller = new Caller();
  budget.begin(started);
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const settle = () => {
      if (settled) return false;
      settled = true;
      alarms.remove(alarm);
      budget.end(timers.now());
      return true;
    };
    const alarm: Alarm = {
      atMs: started + leftMs,
      expire() {
        if (!settle()) return;
        const error = timedOut(limitMs);
        reject(error);
        caller.giveUp(error);
      },
    };
    alarms.add(alarm);
    let running: Promise<T>;
    try {
      running = operation(caller);
    } catch (error) {
      running = Promise.reject(error);
    }
    running.then(
      (value) => settle() && resolve(value),
      (error) => settle() && reject(error),
    );
  });
}

function timedOut(limitMs: number): StoreUnavailableError {
  return new StoreUnavailableError(
    `the database did not answer within DATABASE_TIMEOUT_MS (${limitMs} ms)`,
  );
}
