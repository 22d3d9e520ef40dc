/**
 * One request as a handler sees it: what the request knows of itself, and `deps`, the parts of
 * the service the handler declares it uses (each wing names its own; the app hands every handler
 * the whole service, which has them all).
 */

import type { LimitedClient } from "./limited_client.ts";

/** One request, with the dependencies `Deps` of the handler that serves it. */
export interface RequestContext<Deps> {
  request: Request;
  /** The request's URL, parsed once for every request to the same URL: read it, never change it. */
  url: URL;
  /** The service's base URL and token issuer, without a trailing slash. */
  baseUrl: string;
  deps: Deps;
  /** Correlates this request's log lines. */
  requestId: string;
  /** `performance.now()` when the request arrived (what its log line's `ms` counts from). */
  startedMs: number;
  /** Fields a route adds to the request's one log line (what it issued, to whom). */
  logFields: Record<string, string | number | boolean | undefined>;
  /**
   * The client's address (TRUST_PROXY applied, canonical), or `unknown-client` when a trusted
   * proxy forwarded no address for it.
   */
  clientAddress(): string;
  /**
   * Whom the per-address limits count the client as (its address, a NAT64 address's IPv4), or
   * why they exempt it (loopback, RATE_LIMIT_EXEMPT); see limited_client.ts.
   */
  limitedClient(): LimitedClient;
  /**
   * The headers the app puts on every answer to this request (security headers, HSTS,
   * `X-Request-Id`, CORS). A route that builds its answer from a header list may include them:
   * the app then finds its request id there and adds nothing (the gateway saves a dozen header
   * operations per call); without them the app adds them as usual.
   */
  standardHeaders(): [string, string][];
}
