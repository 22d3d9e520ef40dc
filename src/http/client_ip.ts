/**
 * Which address a request comes from: the socket peer, or, when that peer is a proxy TRUST_PROXY
 * names, the right-most `X-Forwarded-For` entry that is not itself a trusted proxy. Entries to
 * its left are whatever the client chose to send, so they never count. A client the forwarded
 * chain does not name by an address is UNKNOWN_CLIENT.
 *
 * @see RFC 7239 §5.2 (the proxy chain, appended on the right), docs/security.md "Abuse limits"
 */

import { canonicalIpText, createRangeMatcher } from "./ip_address.ts";

/** Whether a canonical address is a proxy whose forwarded headers are believed. */
export type ProxyTrust = (canonical: string) => boolean;

/**
 * The client of a request whose trusted proxies forwarded something that is no address
 * (`unknown`, `0x01020304`, `1.2.3`): all such requests are one client, never the proxy itself
 * (which may be loopback or in RATE_LIMIT_EXEMPT) and never an entry the client chose.
 */
export const UNKNOWN_CLIENT = "unknown-client";

/** The address a request without a TCP peer (in-process, a Unix socket) is counted as. */
const LOCAL_PEER = "127.0.0.1";

/** The trust TRUST_PROXY's ranges describe (none: nobody is trusted). */
export function createProxyTrust(cidrs: readonly string[]): ProxyTrust {
  return cidrs.length === 0 ? () => false : createRangeMatcher(cidrs);
}

/** The socket peer's canonical address, from what `Deno.serve` hands the handler. */
export function peerAddress(info: Deno.ServeHandlerInfo | undefined): string {
  const address = info?.remoteAddr;
  const hostname = address && "hostname" in address ? address.hostname : undefined;
  return (hostname && canonicalIpText(hostname.replace(/^\[(.*)\]$/, "$1"))) ?? LOCAL_PEER;
}

/**
 * `peerAddress` remembering the canonical address of the last peers seen (all forgotten when
 * REMEMBERED_PEERS are held): a busy client's every request would parse its address again.
 */
export function createPeerAddress(): (info: Deno.ServeHandlerInfo | undefined) => string {
  const known = new Map<string, string>();
  return (info) => {
    const address = info?.remoteAddr;
    const hostname = address && "hostname" in address ? address.hostname : undefined;
    if (hostname === undefined) return peerAddress(info);
    let canonical = known.get(hostname);
    if (canonical === undefined) {
      if (known.size >= REMEMBERED_PEERS) known.clear();
      canonical = peerAddress(info);
      known.set(hostname, canonical);
    }
    return canonical;
  };
}

/** How many peers' canonical addresses createPeerAddress remembers at once. */
const REMEMBERED_PEERS = 1024;

/**
 * The client address of a request from the canonical socket `peer`. Walking `X-Forwarded-For`
 * from the right: a trusted proxy's entry moves on, the first other address is the client, and
 * an entry that is no address (a proxy that wrote `unknown`) makes the client UNKNOWN_CLIENT,
 * since what lies left of it is client-chosen. All trusted: the left-most.
 */
export function clientIp(request: Request, peer: string, trusted: ProxyTrust): string {
  if (!trusted(peer)) return peer;
  const entries = forwardedList(request.headers, "x-forwarded-for");
  let nearest = peer;
  for (let i = entries.length - 1; i >= 0; i--) {
    const address = canonicalIpText(withoutPort(entries[i]));
    if (address === undefined) return UNKNOWN_CLIENT;
    if (!trusted(address)) return address;
    nearest = address;
  }
  return nearest;
}

/**
 * The right-most value of a forwarded header (the one the nearest proxy added); undefined when
 * the header is absent, "" when its last value is empty.
 */
export function rightmostForwarded(headers: Headers, name: string): string | undefined {
  const values = forwardedList(headers, name);
  return values.length === 0 ? undefined : values[values.length - 1];
}

/** Every comma-separated value of a header, over all its lines, trimmed. */
function forwardedList(headers: Headers, name: string): string[] {
  const header = headers.get(name);
  return header === null ? [] : header.split(",").map((entry) => entry.trim());
}

/** `[2001:db8::1]:443` or `203.0.113.7:8080` → the bare address; anything else unchanged. */
function withoutPort(entry: string): string {
  const bracketed = entry.match(/^\[([^\]]*)\](?::\d{1,5})?$/);
  if (bracketed) return bracketed[1];
  const v4WithPort = entry.match(/^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/);
  return v4WithPort ? v4WithPort[1] : entry;
}
