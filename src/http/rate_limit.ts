/**
 * Per-client-IP abuse limits, counted in KV so they hold across instances. The spec shows no
 * rate limits; over a limit we answer 429 before any other work (and any upstream call).
 */

import { OAuthError } from "./errors.ts";
import { rateLimitSubject } from "./ip_address.ts";
import { countedAddress, type LimitedClient } from "./limited_client.ts";

/** A fixed-window limit: at most `limit` requests per `windowSeconds`. */
export interface RateLimit {
  limit: number;
  windowSeconds: number;
}

/** What counting against the limits of the buckets `B` needs. */
export interface RateLimitDeps<B extends string> {
  /** Counts one request of `subject` in the window (shared by every instance). */
  store: {
    countRequest(bucket: B, subject: string, limit: number, windowMs: number): Promise<number>;
  };
  config: { rateLimits: Readonly<Partial<Record<B, RateLimit>>> };
  clock: { now(): number };
  metrics: { rateLimitRefusals: { inc(labels: { bucket: B }): void } };
}

/**
 * Throws a 429 OAuthError when `client` (as RequestContext.limitedClient gives it) is over the
 * limit of `bucket`; an exempt client never is, an IPv6 client is counted by its /64.
 */
export async function enforceRateLimit<B extends string>(
  { store, config, clock, metrics }: RateLimitDeps<B>,
  bucket: B,
  client: LimitedClient,
): Promise<void> {
  const address = countedAddress(client);
  if (address === undefined) return;
  await enforceSubjectRateLimit(
    { store, config, clock, metrics },
    bucket,
    rateLimitSubject(address),
  );
}

/**
 * Throws a 429 OAuthError when `subject` (a client address as rateLimitSubject gives it, or an
 * authenticated caller's name) is over the limit of `bucket`.
 */
export async function enforceSubjectRateLimit<B extends string>(
  { store, config, clock, metrics }: RateLimitDeps<B>,
  bucket: B,
  subject: string,
): Promise<void> {
  const limit = config.rateLimits[bucket];
  if (!limit) return;
  const windowMs = limit.windowSeconds * 1000;
  const count = await store.countRequest(bucket, subject, limit.limit, windowMs);
  if (count <= limit.limit) return;
  metrics.rateLimitRefusals.inc({ bucket });
  throw tooManyRequests(Math.ceil((windowMs - (clock.now() % windowMs)) / 1000));
}

/** The 429 of every rate limit: `temporarily_unavailable`, with `Retry-After` in seconds. */
export function tooManyRequests(retryAfterSeconds: number): OAuthError {
  const retryAfter = String(retryAfterSeconds);
  return new OAuthError(
    429,
    "temporarily_unavailable",
    `Too many requests; try again in at most ${retryAfter} seconds`,
    { "Retry-After": retryAfter },
  );
}
