/**
 * Whom the per-address limits count a request as (RATE_LIMIT_AUTHORIZE, _POLL, _TOKEN,
 * _REGISTER, introspection's unauthenticated count, the pending-flow caps and the poll share):
 * the client address TRUST_PROXY gives (client_ip.ts), a NAT64 address as the IPv4 client it
 * translates, or nobody when the client is exempt (loopback under RATE_LIMIT_LOOPBACK=exempt, an
 * address in RATE_LIMIT_EXEMPT). UNKNOWN_CLIENT is counted, never exempt.
 *
 * @see docs/security.md "Abuse limits"
 */

import { UNKNOWN_CLIENT } from "./client_ip.ts";
import { createRangeMatcher, isLoopbackIp, nat64Ipv4 } from "./ip_address.ts";

/** What decides the exemptions. */
export interface LimitedClientSettings {
  /** `exempt`: loopback clients are never limited. */
  rateLimitLoopback: "exempt" | "limit";
  /** Canonical CIDRs whose clients are never limited (an office's egress address). */
  rateLimitExempt: readonly string[];
}

/**
 * How the per-address limits see a client: counted under an address (a canonical one, a NAT64
 * address's IPv4, or UNKNOWN_CLIENT), or exempt, as loopback or as listed in RATE_LIMIT_EXEMPT.
 */
export type LimitedClient = { counted: string } | { exempt: "loopback" | "listed" };

/** The LimitedClient of a canonical client address (or UNKNOWN_CLIENT). */
export type LimitedClientOf = (client: string) => LimitedClient;

/** The LimitedClientOf of one configuration (its ranges parsed once). */
export function createLimitedClient(settings: LimitedClientSettings): LimitedClientOf {
  const exemptLoopback = settings.rateLimitLoopback === "exempt";
  const listed = settings.rateLimitExempt.length === 0
    ? () => false
    : createRangeMatcher(settings.rateLimitExempt);
  const decide: LimitedClientOf = (client) => {
    if (client === UNKNOWN_CLIENT) return { counted: client };
    // Loopback by its own address only: a NAT64 address embedding 127.0.0.1 is no local tool,
    // and exempting it would hand the exemption to whatever a translator wrote.
    if (exemptLoopback && isLoopbackIp(client)) return { exempt: "loopback" };
    const counted = nat64Ipv4(client) ?? client;
    // An office reached through a translator is exempt by its IPv4 egress address as well.
    if (listed(client) || listed(counted)) return { exempt: "listed" };
    return { counted };
  };
  // The decision of the last clients seen, so that a busy client's requests do not parse its
  // address again each time (two or three ipaddr.js parses, 1–2% of a refresh's CPU).
  const decided = new Map<string, LimitedClient>();
  return (client) => {
    let limited = decided.get(client);
    if (limited === undefined) {
      if (decided.size >= REMEMBERED_CLIENTS) decided.clear();
      limited = Object.freeze(decide(client));
      decided.set(client, limited);
    }
    return limited;
  };
}

/** How many clients' decisions are remembered at once (all forgotten when full). */
const REMEMBERED_CLIENTS = 1024;

/** The address `client` is counted under, undefined when it is exempt. */
export function countedAddress(client: LimitedClient): string | undefined {
  return "counted" in client ? client.counted : undefined;
}
