import type { Timers } from "../src/gateway/deadlines.ts";

/** Timers on a hand-moved clock: `advance` fires what is due, in order. */
export function manualTimers() {
  let now = 1_000_000;
  let nextId = 1;
  const pending = new Map<number, { at: number; run: () => void }>();
  const timers: Timers = {
    now: () => now,
    setTimeout(run, ms) {
      const id = nextId++;
      pending.set(id, { at: now + ms, run });
      return id;
    },
    clearTimeout(id) {
      pending.delete(id as number);
    },
  };
  return {
    timers,
    pending,
    advance(ms: number) {
      now += ms;
      for (const [id, timer] of [...pending].sort((a, b) => a[1].at - b[1].at)) {
        if (timer.at > now) continue;
        pending.delete(id);
        timer.run();
      }
    },
  };
}
