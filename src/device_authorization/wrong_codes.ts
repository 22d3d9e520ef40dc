/**
 * Wrong user codes at `/device`, counted per client address as the rate limits count it
 * (RATE_LIMIT_DEVICE, an IPv6 client by its /64, loopback as RATE_LIMIT_LOOPBACK says): past
 * the limit every code from that address answers 429 until the window ends. With 20 tries per
 * 10 minutes against 20^8 codes, guessing a live one is hopeless within its `expires_in`.
 */

import { isLoopbackIp, rateLimitSubject } from "../http/ip_address.ts";
import { type RateLimit, tooManyRequests } from "../http/rate_limit.ts";
import type { Metrics } from "../metrics/catalog.ts";
import type { Store } from "../store/mod.ts";

/** What counting wrong codes uses. */
export interface WrongCodeDeps {
  store: Pick<Store, "countRequest" | "requestsCounted">;
  config: { rateLimits: { device?: RateLimit }; rateLimitLoopback: "exempt" | "limit" };
  clock: { now(): number };
  metrics: Pick<Metrics, "rateLimitRefusals">;
}

const BUCKET = "device";

/** Throws the 429 when `ip` has used up its wrong codes in this window. */
export async function refuseAfterWrongCodes(deps: WrongCodeDeps, ip: string): Promise<void> {
  const limit = limitFor(deps, ip);
  if (!limit) return;
  const windowMs = limit.windowSeconds * 1000;
  const counted = await deps.store.requestsCounted(BUCKET, rateLimitSubject(ip), windowMs);
  if (counted >= limit.limit) throw refusal(deps, windowMs);
}

/** Counts one wrong code of `ip`; throws the 429 when it was one too many. */
export async function countWrongCode(deps: WrongCodeDeps, ip: string): Promise<void> {
  const limit = limitFor(deps, ip);
  if (!limit) return;
  const windowMs = limit.windowSeconds * 1000;
  const count = await deps.store.countRequest(BUCKET, rateLimitSubject(ip), limit.limit, windowMs);
  if (count > limit.limit) throw refusal(deps, windowMs);
}

function limitFor(deps: WrongCodeDeps, ip: string): RateLimit | undefined {
  if (deps.config.rateLimitLoopback === "exempt" && isLoopbackIp(ip)) return undefined;
  return deps.config.rateLimits.device;
}

function refusal(deps: WrongCodeDeps, windowMs: number) {
  deps.metrics.rateLimitRefusals.inc({ bucket: BUCKET });
  return tooManyRequests(Math.ceil((windowMs - (deps.clock.now() % windowMs)) / 1000));
}
