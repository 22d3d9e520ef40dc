/**
 * Wrong user codes at `/device`, counted per client address as the rate limits count it
 * (RATE_LIMIT_DEVICE, an IPv6 client by its /64, a NAT64 one as its IPv4, loopback as
 * RATE_LIMIT_LOOPBACK says, RATE_LIMIT_EXEMPT not at all): past the limit every code from that
 * address answers 429 until the window ends. With 20 tries per 10 minutes against 20^8 codes,
 * guessing a live one is hopeless within its `expires_in`.
 */

import { rateLimitSubject } from "../../http/ip_address.ts";
import { countedAddress, type LimitedClient } from "../../http/limited_client.ts";
import { type RateLimit, tooManyRequests } from "../../http/rate_limit.ts";
import type { Metrics } from "../../metrics/catalog.ts";
import type { Store } from "../../store/mod.ts";

/** What counting wrong codes uses. */
export interface WrongCodeDeps {
  store: Pick<Store, "countRequest" | "requestsCounted">;
  config: { rateLimits: { device?: RateLimit } };
  clock: { now(): number };
  metrics: Pick<Metrics, "rateLimitRefusals">;
}

const BUCKET = "device";

/**
 * Throws the 429 when `client` (as RequestContext.limitedClient gives it) has used up its wrong
 * codes in this window.
 */
export async function refuseAfterWrongCodes(
  deps: WrongCodeDeps,
  client: LimitedClient,
): Promise<void> {
  const counted = countedUnder(deps, client);
  if (!counted) return;
  const { limit, subject, windowMs } = counted;
  if (await deps.store.requestsCounted(BUCKET, subject, windowMs) >= limit) {
    throw refusal(deps, windowMs);
  }
}

/** Counts one wrong code of `client`; throws the 429 when it was one too many. */
export async function countWrongCode(deps: WrongCodeDeps, client: LimitedClient): Promise<void> {
  const counted = countedUnder(deps, client);
  if (!counted) return;
  const { limit, subject, windowMs } = counted;
  if (await deps.store.countRequest(BUCKET, subject, limit, windowMs) > limit) {
    throw refusal(deps, windowMs);
  }
}

/** The limit, subject and window `client` is counted under; undefined: exempt, or no limit. */
function countedUnder(deps: WrongCodeDeps, client: LimitedClient) {
  const address = countedAddress(client);
  const limit = deps.config.rateLimits.device;
  if (address === undefined || !limit) return undefined;
  return {
    limit: limit.limit,
    subject: rateLimitSubject(address),
    windowMs: limit.windowSeconds * 1000,
  };
}

function refusal(deps: WrongCodeDeps, windowMs: number) {
  deps.metrics.rateLimitRefusals.inc({ bucket: BUCKET });
  return tooManyRequests(Math.ceil((windowMs - (deps.clock.now() % windowMs)) / 1000));
}
