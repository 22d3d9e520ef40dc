/** The noise gate: measure only once the machine is quiet, so that others' load does not count. */

import { machineBusyTicks } from "./process_stats.ts";
import { say } from "./log.ts";
import { sleep } from "./timing.ts";

/** When the machine counts as quiet, and how long to wait for it. */
export interface QuietOptions {
  /** Busy cores below which the machine is quiet. */
  quietCores: number;
  /** Seconds after which the wait gives up. */
  maxWaitS: number;
  ticksPerSecond: number;
}

/** Waits until the machine was below `quietCores` for 1 s; seconds waited, -1 if it gave up. */
export async function waitQuiet(options: QuietOptions): Promise<number> {
  const started = Date.now();
  while (true) {
    const a = machineBusyTicks();
    await sleep(1000);
    const busy = (machineBusyTicks() - a) / options.ticksPerSecond;
    if (busy < options.quietCores) return (Date.now() - started) / 1000;
    if (Date.now() - started > options.maxWaitS * 1000) {
      say(`machine still busy (${busy.toFixed(2)} cores) after ${options.maxWaitS} s; measuring`);
      return -1;
    }
  }
}
