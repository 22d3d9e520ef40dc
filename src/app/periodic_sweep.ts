/**
 * Sign-ins whose code expired unredeemed, and device flows that expired holding a GitLab token,
 * are swept where sign-ins complete, and also here once a minute: on an idle service no sign-in
 * completes, and their GitLab tokens would otherwise wait unrevoked until the store drops them.
 * Sessions that expired idle are swept only here. Every instance sweeps the same store; each
 * record is taken by one of them (the store's atomic take), so a token is revoked once.
 */

import { sweepAbandonedSignIns, sweepIdleSessions } from "../session/end.ts";
import type { AppDeps } from "./context.ts";

/** How often an instance sweeps. */
export const SWEEP_EVERY_MS = 60_000;

/** A running sweep: `tick` sweeps once now (the timer calls it); `stop` ends the timer. */
export interface PeriodicSweep {
  tick(): Promise<void>;
  stop(): void;
}

/** Sweeps every `everyMs` (undefined: only when `tick` is called); nothing without OAuth. */
export function sweepPeriodically(
  deps: Pick<AppDeps, "store" | "logger" | "verifiedTokens" | "oauth">,
  everyMs: number | undefined = SWEEP_EVERY_MS,
): PeriodicSweep {
  const tick = async () => {
    if (!deps.oauth) return;
    const { store, logger, verifiedTokens } = deps;
    const endDeps = { store, logger, verifiedTokens, upstream: deps.oauth.upstream };
    await sweepAbandonedSignIns(endDeps, { sweep: "periodic" });
    await sweepIdleSessions(endDeps, { sweep: "periodic" });
  };
  const timer = everyMs === undefined ? undefined : setInterval(() => void tick(), everyMs);
  if (timer !== undefined) Deno.unrefTimer(timer);
  return { tick, stop: () => clearInterval(timer) };
}
