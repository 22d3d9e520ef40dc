/**
 * Which IP addresses a metadata document may be fetched from: public unicast only, never
 * loopback, private, link-local, CGNAT, cloud metadata, documentation or multicast ranges, also
 * when an IPv4 address hides in an IPv6 one (mapped, NAT64, 6to4).
 *
 * @see RFC 6890 (special-purpose address registries), draft-ietf-oauth-client-id-metadata-document
 *   §6 (server-side request forgery)
 */

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
  const bare = address.replace(/^\[|\]$/g, "");
  const v4 = parseIpv4(bare);
  if (v4 !== undefined) return isPublicIpv4(v4);
  const v6 = parseIpv6(bare);
  return v6 !== undefined && isPublicIpv6(v6);
}

/** Whether `host` is an IP literal rather than a name. */
export function isIpLiteral(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "");
  return parseIpv4(bare) !== undefined || parseIpv6(bare) !== undefined;
}

function isPublicIpv4(address: number): boolean {
  return !IPV4_BLOCKED.some(([network, prefix]) => {
    const mask = (~0 << (32 - prefix)) >>> 0;
    // The table's entries are valid addresses; `?? 0` only satisfies the type.
    return ((address & mask) >>> 0) === (((parseIpv4(network) ?? 0) & mask) >>> 0);
  });
}

function isPublicIpv6(h: number[]): boolean {
  const embeddedV4 = (hi: number, lo: number) => ((h[hi] << 16) >>> 0) + h[lo];
  if (h.slice(0, 5).every((x) => x === 0) && (h[5] === 0xffff || h[5] === 0)) {
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible), :: and ::1 among them.
    return isPublicIpv4(embeddedV4(6, 7));
  }
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

function parseIpv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p))) return undefined;
  const octets = parts.map(Number);
  if (octets.some((o) => o > 255)) return undefined;
  return ((octets[0] << 24) >>> 0) + (octets[1] << 16) + (octets[2] << 8) + octets[3];
}

/** Eight 16-bit groups, or undefined; an embedded dotted IPv4 tail is accepted. */
function parseIpv6(text: string): number[] | undefined {
  if (!text.includes(":") || text.includes("%")) return undefined;
  const lastColon = text.lastIndexOf(":");
  const dotted = text.slice(lastColon + 1);
  if (dotted.includes(".")) {
    const v4 = parseIpv4(dotted);
    if (v4 === undefined) return undefined;
    const hex = `${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`;
    return parseIpv6(text.slice(0, lastColon + 1) + hex);
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const groups = (part: string) => part === "" ? [] : part.split(":");
  const left = groups(halves[0]);
  const right = halves.length === 2 ? groups(halves[1]) : [];
  if (![...left, ...right].every((g) => /^[0-9a-f]{1,4}$/i.test(g))) return undefined;
  const missing = 8 - left.length - right.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  return [
    ...left.map((g) => parseInt(g, 16)),
    ...Array<number>(halves.length === 2 ? missing : 0).fill(0),
    ...right.map((g) => parseInt(g, 16)),
  ];
}
