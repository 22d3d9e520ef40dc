/**
 * A proxy on the same host without TRUST_PROXY: every request then comes from loopback, which
 * is exempt from the rate limits (RATE_LIMIT_LOOPBACK=exempt) and names no client, so the limits
 * are silently off. A loopback request carrying `X-Forwarded-For` or `Forwarded` while
 * TRUST_PROXY is unset logs one warning with the fix; once per app, never per request. Every one
 * of the first requests is looked at, then one in sixteen.
 *
 * @see docs/security.md "Abuse limits", RFC 7239
 */

import { isLoopbackIp } from "./ip_address.ts";

/** Looks at a request's socket peer and headers; warns at most once. */
export type ProxyWarning = (headers: Headers, peer: () => string) => void;

/** The check for an app; a no-op when TRUST_PROXY is set. */
export function createUnconfiguredProxyWarning(
  trustsProxies: boolean,
  logger: { warn(message: string): void },
): ProxyWarning {
  let warned = trustsProxies;
  let seen = 0;
  return (headers, peer) => {
    if (warned || !sampled(seen++)) return;
    if (!headers.has("x-forwarded-for") && !headers.has("forwarded")) return;
    if (!isLoopbackIp(peer())) return;
    warned = true;
    logger.warn(
      "a proxy on this host forwards requests but TRUST_PROXY is unset: every client counts " +
        "as loopback (exempt from rate limits, one address for all); set TRUST_PROXY to the " +
        "proxy's address (e.g. 127.0.0.1/32,::1/128) and BASE_URL",
    );
  };
}

/** Requests looked at from the start, before only one in SAMPLE_EVERY is. */
const LOOK_AT_FIRST = 256;
const SAMPLE_EVERY = 16;

/**
 * Whether the `index`th request is looked at: a proxy forwards every request, so a sample finds
 * it within a few requests, and a busy gateway does not pay two header lookups on each.
 */
function sampled(index: number): boolean {
  return index < LOOK_AT_FIRST || index % SAMPLE_EVERY === 0;
}
