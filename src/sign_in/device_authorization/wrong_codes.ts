/**
 * Wrong user codes at `/device`, counted per client address as the rate limits count it
 * (RATE_LIMIT_DEVICE, an IPv6 client by its /64, a NAT64 one as its IPv4, loopback as
 * RATE_LIMIT_LOOPBACK says, RATE_LIMIT_EXEMPT not at all), and per network (its IPv4 /24 or
 * IPv6 /56, as the pending-flow caps count it) at NETWORK_FACTOR times that limit: past either
 * limit every code from that address answers 429 until the window ends. With 20 tries per 10
 * minutes against 20^8 codes, guessing a live one is hopeless within its `expires_in`; the
 * network's count keeps it so for an attacker holding many /64s (a free tunnel broker's /48 has
 * 65,536 of them, but only 256 /56s).
 */

import { clientPrefix, rateLimitSubject } from "../../http/ip_address.ts";
import { countedAddress, type LimitedClient } from "../../http/limited_client.ts";
import { type RateLimit, tooManyRequests } from "../../http/rate_limit.ts";
import type { Metrics } from "../../metrics/catalog.ts";
import type { Store } from "../../store/mod.ts";

/** What counting wrong codes uses. */
export interface WrongCodeDeps {
  store: Pick<Store, "countRequest" | "requestsCounted" | "uncountRequest">;
  config: { rateLimits: { device?: RateLimit } };
  clock: { now(): number };
  metrics: Pick<Metrics, "rateLimitRefusals">;
}

const BUCKET = "device";

/** A network's wrong codes may be this many times an address's. */
export const NETWORK_FACTOR = 5;

/**
 * Throws the 429 when `client` (as RequestContext.limitedClient gives it) has used up its wrong
 * codes in this window.
 */
export async function refuseAfterWrongCodes(
  deps: WrongCodeDeps,
  client: LimitedClient,
): Promise<void> {
  const { windowMs, subjects } = countedUnder(deps, client);
  const counts = await Promise.all(
    subjects.map(({ subject }) => deps.store.requestsCounted(BUCKET, subject, windowMs)),
  );
  if (subjects.some(({ limit }, i) => counts[i] >= limit)) throw refusal(deps, windowMs);
}

/** A code's attempt, counted before its lookup. */
export interface CodeAttempt {
  /** The code was right: the attempt is taken back, as only wrong codes use the allowance. */
  wasRight(): Promise<void>;
}

/**
 * Counts one attempt of `client` at a code before the code is looked up, and throws the 429
 * when it is one too many: counted only after a wrong lookup, a burst of parallel guesses would
 * all be looked up while the count caught up with them. The caller takes a right code's attempt
 * back (`wasRight`).
 */
export async function countCodeAttempt(
  deps: WrongCodeDeps,
  client: LimitedClient,
): Promise<CodeAttempt> {
  const { windowMs, subjects } = countedUnder(deps, client);
  const countedAt = deps.clock.now();
  const counts = await Promise.all(
    subjects.map(({ subject, limit }) => deps.store.countRequest(BUCKET, subject, limit, windowMs)),
  );
  // A count over its limit was not made; the others were, and are taken back with the refusal.
  const counted = subjects.filter(({ limit }, i) => counts[i] <= limit);
  const takeBack = () =>
    Promise.all(
      counted.map(({ subject }) => deps.store.uncountRequest(BUCKET, subject, windowMs, countedAt)),
    ).then(() => {});
  if (counted.length < subjects.length) {
    await takeBack();
    throw refusal(deps, windowMs);
  }
  return { wasRight: takeBack };
}

/** A subject counted, and its limit. */
interface CountedSubject {
  subject: string;
  limit: number;
}

/**
 * The window and the subjects `client` is counted under (its address, then its network); none
 * when it is exempt or there is no limit.
 */
function countedUnder(
  deps: WrongCodeDeps,
  client: LimitedClient,
): { windowMs: number; subjects: CountedSubject[] } {
  const address = countedAddress(client);
  const limit = deps.config.rateLimits.device;
  if (address === undefined || !limit) return { windowMs: 0, subjects: [] };
  const subjects = [{ subject: rateLimitSubject(address), limit: limit.limit }];
  const network = clientPrefix(address);
  // An address that is no IP (UNKNOWN_CLIENT) is its own "network": counted once.
  if (network !== address) subjects.push({ subject: network, limit: limit.limit * NETWORK_FACTOR });
  return { windowMs: limit.windowSeconds * 1000, subjects };
}

function refusal(deps: WrongCodeDeps, windowMs: number) {
  deps.metrics.rateLimitRefusals.inc({ bucket: BUCKET });
  return tooManyRequests(Math.ceil((windowMs - (deps.clock.now() % windowMs)) / 1000));
}
