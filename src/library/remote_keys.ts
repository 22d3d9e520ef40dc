/**
 * A resource server's copy of the service's JWKS: fetched on first use, kept while fresh, and
 * fetched again once when a token names a `kid` it does not hold (the service rotated), at most
 * every `refetchIntervalMs` so a stream of forged kids cannot make it hammer the service; while
 * no set could be had at all, at most every `retryMs`, so neither can a service that is down.
 */

import type { Clock } from "../clock.ts";

/** A published public key, as `/.well-known/jwks.json` lists it. */
export type PublishedKey = JsonWebKey & { kid?: string };

/** The key set, looked up by kid. */
export interface RemoteKeySet {
  /** The key named `kid`, or undefined when the set (fetched again if allowed) has none. */
  find(kid: string): Promise<PublishedKey | undefined>;
}

/** Where and how often. */
export interface RemoteKeySetOptions {
  url: string;
  clock: Clock;
  fetch: typeof fetch;
  /** How long a fetched set is used without asking again (the JWKS's max-age). */
  maxAgeMs: number;
  /** The least time between two fetches caused by unknown kids. */
  refetchIntervalMs: number;
  /** While no set could be had at all, the least time between two fetches. */
  retryMs: number;
  timeoutMs: number;
}

/** Thrown when no key set could be had at all (the service unreachable on first use). */
export class KeySetUnavailable extends Error {
  override name = "KeySetUnavailable";
}

/** A key set over `options.url`; one fetch at a time, shared by concurrent lookups. */
export function createRemoteKeySet(options: RemoteKeySetOptions): RemoteKeySet {
  let keys: PublishedKey[] | undefined;
  let fetchedAt = -Infinity;
  let inFlight: Promise<void> | undefined;

  async function load(): Promise<void> {
    fetchedAt = options.clock.now();
    try {
      const response = await options.fetch(options.url, {
        headers: { Accept: "application/json" },
        // The keys are the service's at its URL: a redirect elsewhere would let another host sign.
        redirect: "manual",
        signal: AbortSignal.timeout(options.timeoutMs),
      });
      const body: unknown = response.ok ? await response.json() : undefined;
      if (!response.ok) await response.body?.cancel();
      const listed = (body as { keys?: unknown } | undefined)?.keys;
      if (Array.isArray(listed)) keys = listed.filter(isObject);
    } catch {
      // Keep the set we had: the service being briefly unreachable is no reason to refuse.
    }
    if (!keys) throw unavailable(options.url);
  }

  function refresh(): Promise<void> {
    return inFlight ??= load().finally(() => inFlight = undefined);
  }

  const lookup = (kid: string) => keys?.find((key) => key.kid === kid);

  return {
    async find(kid) {
      const sinceFetch = options.clock.now() - fetchedAt;
      // A failed first fetch is not tried again by every request that follows it.
      if (!keys && !inFlight && sinceFetch < options.retryMs) throw unavailable(options.url);
      if (!keys || sinceFetch >= options.maxAgeMs) await refresh();
      const found = lookup(kid);
      if (found || options.clock.now() - fetchedAt < options.refetchIntervalMs) return found;
      await refresh();
      return lookup(kid);
    },
  };
}

function unavailable(url: string): KeySetUnavailable {
  return new KeySetUnavailable(`no key set from ${url}`);
}

function isObject(value: unknown): value is PublishedKey {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
