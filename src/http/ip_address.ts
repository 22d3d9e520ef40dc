/**
 * IP addresses as the service counts and trusts them: one spelling per address (IPv4-mapped
 * IPv6 is IPv4, IPv6 in RFC 5952 form), IPv6 clients counted per /64 (one subscriber's
 * allocation), NAT64 addresses as the IPv4 client they translate, and CIDR ranges for
 * TRUST_PROXY and RATE_LIMIT_EXEMPT. Parsing is ipaddr.js's, made strict: a dotted quad only
 * (no `1.2.3` or octal), no IPv6 zone.
 *
 * @see RFC 5952 (IPv6 text form), RFC 4291 §2.5.5.2 (IPv4-mapped), RFC 6177 (/64 per site),
 *   RFC 6052 §2.1 and RFC 8215 (NAT64 prefixes)
 */

import ipaddr from "ipaddr.js";

/** A parsed address: IPv4 (mapped IPv6 included) or IPv6. */
export type IpAddress = ipaddr.IPv4 | ipaddr.IPv6;

/** A parsed CIDR range. */
export type IpRange = [IpAddress, number];

/** Longer than any textual IP address: anything longer is not one. */
const MAX_ADDRESS_LENGTH = 45;

/** The address `text` names, or undefined when it is not a strict IPv4 or IPv6 address. */
export function parseIpAddress(text: string): IpAddress | undefined {
  if (text.length > MAX_ADDRESS_LENGTH || text.includes("%")) return undefined;
  const valid = text.includes(":")
    ? ipaddr.IPv6.isValid(text)
    : ipaddr.IPv4.isValidFourPartDecimal(text);
  return valid ? ipaddr.process(text) : undefined;
}

/** The one spelling of an address: dotted quad, or RFC 5952 IPv6. */
export function canonicalIp(address: IpAddress): string {
  return address.kind() === "ipv6"
    ? (address as ipaddr.IPv6).toRFC5952String()
    : address.toString();
}

/**
 * The NAT64 prefixes whose addresses stand for the IPv4 address in their last 32 bits: the
 * well-known `64:ff9b::/96` and the /96 prefixes of the local-use `64:ff9b:1::/48`. A
 * translator's IPv4 clients all fall in one /64, so counted as IPv6 they would share one bucket.
 */
const NAT64_PREFIXES: readonly IpRange[] = [
  ipaddr.parseCIDR("64:ff9b::/96"),
  ipaddr.parseCIDR("64:ff9b:1::/48"),
];

/**
 * The IPv4 address (dotted quad) a canonical NAT64 address translates, undefined for any
 * other address.
 */
export function nat64Ipv4(canonical: string): string | undefined {
  const address = parseIpAddress(canonical);
  if (address?.kind() !== "ipv6") return undefined;
  const ipv6 = address as ipaddr.IPv6;
  if (!NAT64_PREFIXES.some(([base, prefix]) => ipv6.match(base as ipaddr.IPv6, prefix))) {
    return undefined;
  }
  const [high, low] = ipv6.parts.slice(6);
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]).toString();
}

/** The canonical spelling of `text`, or undefined when it is not an address. */
export function canonicalIpText(text: string): string | undefined {
  const address = parseIpAddress(text);
  return address && canonicalIp(address);
}

/**
 * What a rate limit counts a canonical address as: an IPv4 address itself, an IPv6 address by
 * its /64 (a client owns the whole /64 and could otherwise take a fresh address per request).
 */
export function rateLimitSubject(canonical: string): string {
  const address = parseIpAddress(canonical);
  if (!address || address.kind() === "ipv4") return canonical;
  const words = (address as ipaddr.IPv6).parts.slice(0, 4);
  const network = new ipaddr.IPv6([...words, 0, 0, 0, 0]);
  return `${network.toRFC5952String()}/64`;
}

/**
 * The network a canonical address is counted under by the pending-flow caps and the GitLab poll
 * budget: an IPv4 address by its /24, an IPv6 address by its /56. These are the smallest blocks a
 * subscriber or a hosting customer commonly gets whole (an IPv6 /48 holds 256 of them), so taking
 * fresh addresses inside one buys no more flows or polls.
 */
export function clientPrefix(canonical: string): string {
  const address = parseIpAddress(canonical);
  if (!address) return canonical;
  if (address.kind() === "ipv4") {
    const [a, b, c] = (address as ipaddr.IPv4).octets;
    return `${a}.${b}.${c}.0/24`;
  }
  const [w0, w1, w2, w3] = (address as ipaddr.IPv6).parts;
  const network = new ipaddr.IPv6([w0, w1, w2, w3 & 0xff00, 0, 0, 0, 0]);
  return `${network.toRFC5952String()}/56`;
}

/** Whether `canonical` is a loopback address (127.0.0.0/8, ::1). */
export function isLoopbackIp(canonical: string): boolean {
  return parseIpAddress(canonical)?.range() === "loopback";
}

/**
 * A CIDR range (`10.0.0.0/8`, `fd00::/8`) or a bare address (a range of one), normalised to
 * canonical text; undefined when it is neither.
 */
export function parseCidr(text: string): string | undefined {
  const [addressText, prefixText, ...rest] = text.split("/");
  const address = parseIpAddress(addressText);
  if (!address || rest.length > 0) return undefined;
  const bits = address.kind() === "ipv4" ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (prefix > bits) return undefined;
  return `${canonicalIp(address)}/${prefix}`;
}

/** Whether a canonical address lies in one of `ranges` (parsed once, matched per request). */
export function createRangeMatcher(cidrs: readonly string[]): (canonical: string) => boolean {
  const ranges: IpRange[] = cidrs.map((cidr) => ipaddr.parseCIDR(cidr));
  return (canonical) => {
    const address = parseIpAddress(canonical);
    return address !== undefined &&
      ranges.some(([base, prefix]) => sameKindMatch(address, base, prefix));
  };
}

function sameKindMatch(address: IpAddress, base: IpAddress, prefix: number): boolean {
  if (address.kind() !== base.kind()) return false;
  return address.kind() === "ipv4"
    ? (address as ipaddr.IPv4).match(base as ipaddr.IPv4, prefix)
    : (address as ipaddr.IPv6).match(base as ipaddr.IPv6, prefix);
}
