/**
 * Which IP addresses a metadata document may be fetched from: public unicast only, never
 * loopback, private, link-local, CGNAT, cloud metadata, documentation or multicast ranges, also
 * when an IPv4 address hides in an IPv6 one (mapped, NAT64, 6to4).
 *
 * @see RFC 6890 (special-purpose address registries), draft-ietf-oauth-client-id-metadata-document
 *   §6 (server-side request forgery)
 */

import type { IPv4, IPv6 } from "ipaddr.js";
import { parseIpAddress } from "../http/ip_address.ts";

/** IPv4 ranges that are not public: [network, prefix length (1–32)]. */
const IPV4_BLOCKED: readonly [string, number][] = [
  ["0.0.0.0", 8], // "this network"
  ["10.0.0.0", 8], // private
  ["100.64.0.0", 10], // CGNAT (also Alibaba's metadata 100.100.100.200)
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local, cloud metadata 169.254.169.254
  ["172.16.0.0", 12], // private
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation
  ["192.88.99.0", 24], // 6to4 relay
  ["192.168.0.0", 16], // private
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation
  ["203.0.113.0", 24], // documentation
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, broadcast
];

/** Whether `address` (IPv4 dotted or IPv6, brackets allowed) is a public unicast address. */
export function isPublicAddress(address: string): boolean {
  const parsed = parseIpAddress(unbracketed(address));
  if (parsed === undefined) return false;
  // parseIpAddress reads an IPv4-mapped IPv6 address as the IPv4 address.
  return parsed.kind() === "ipv4"
    ? isPublicIpv4(ipv4Number((parsed as IPv4).octets))
    : isPublicIpv6((parsed as IPv6).parts);
}

/** Whether `host` is an IP literal rather than a name. */
export function isIpLiteral(host: string): boolean {
  return parseIpAddress(unbracketed(host)) !== undefined;
}

function unbracketed(host: string): string {
  return host.replace(/^\[|\]$/g, "");
}

function ipv4Number(octets: number[]): number {
  return ((octets[0] << 24) >>> 0) + (octets[1] << 16) + (octets[2] << 8) + octets[3];
}

/** The table's networks as numbers. */
const IPV4_BLOCKED_NETWORKS = IPV4_BLOCKED.map(([network, prefix]) => {
  const octets = network.split(".").map(Number);
  return [ipv4Number(octets), prefix] as const;
});

function isPublicIpv4(address: number): boolean {
  return !IPV4_BLOCKED_NETWORKS.some(([network, prefix]) => {
    const mask = (~0 << (32 - prefix)) >>> 0;
    return ((address & mask) >>> 0) === ((network & mask) >>> 0);
  });
}

function isPublicIpv6(h: number[]): boolean {
  const embeddedV4 = (hi: number, lo: number) => ((h[hi] << 16) >>> 0) + h[lo];
  if (h.slice(0, 5).every((x) => x === 0) && (h[5] === 0xffff || h[5] === 0)) {
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible), :: and ::1 among them.
    return isPublicIpv4(embeddedV4(6, 7));
  }
  if (h.slice(0, 4).every((x) => x === 0) && h[4] === 0xffff && h[5] === 0) {
    return false; // ::ffff:0:a.b.c.d, IPv4-translated (RFC 2765, SIIT)
  }
  if (h[0] === 0x64 && h[1] === 0xff9b && h[2] === 0x0001) return false; // local-use NAT64 /48
  if (h[0] === 0x64 && h[1] === 0xff9b) return isPublicIpv4(embeddedV4(6, 7)); // NAT64
  if (h[0] === 0x2002) return isPublicIpv4(embeddedV4(1, 2)); // 6to4
  if ((h[0] & 0xfe00) === 0xfc00) return false; // unique local (AWS metadata fd00:ec2::254)
  if ((h[0] & 0xffc0) === 0xfe80) return false; // link-local
  if ((h[0] & 0xffc0) === 0xfec0) return false; // site-local (deprecated)
  if ((h[0] & 0xff00) === 0xff00) return false; // multicast
  if (h[0] === 0x2001 && h[1] === 0x0db8) return false; // documentation
  if (h[0] === 0x0100 && h[1] === 0 && h[2] === 0 && h[3] === 0) return false; // discard
  if (h[0] === 0x2001 && h[1] < 0x0200) return false; // Teredo, benchmarking, ORCHID …
  return true;
}
