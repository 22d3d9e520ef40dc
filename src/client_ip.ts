/**
 * Which address a request comes from, for rate limits: the socket peer, or behind trusted
 * proxies (TRUST_PROXY) the right-most `X-Forwarded-For` entry that is not itself a proxy on a
 * loopback or private network — the left-most entries are whatever the client chose to send.
 */

/** The client address of a request. */
export function clientIp(request: Request, peer: string | undefined, trustProxy: boolean): string {
  const socket = peer ?? "127.0.0.1";
  if (!trustProxy || !isInternal(socket)) return socket;
  // Entries that are not addresses (garbage, or kilobytes of it: the counter's KV key must
  // stay small) are skipped.
  const forwarded = (request.headers.get("x-forwarded-for") ?? "")
    .split(",").map((entry) => normalize(entry.trim())).filter(isIpAddress);
  for (let i = forwarded.length - 1; i >= 0; i--) {
    if (!isInternal(forwarded[i])) return forwarded[i];
  }
  return forwarded[0] ?? socket;
}

/** Loopback addresses: 127.0.0.0/8 and ::1. */
export function isLoopback(ip: string): boolean {
  return ip === "::1" || ip.startsWith("127.") || ip.startsWith("::ffff:127.");
}

function isInternal(ip: string): boolean {
  if (isLoopback(ip)) return true;
  const v4 = ip.startsWith("::ffff:") ? ip.slice(7) : ip;
  const octets = v4.split(".").map(Number);
  if (octets.length === 4 && octets.every((n) => Number.isInteger(n) && n >= 0 && n <= 255)) {
    const [a, b] = octets;
    return a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) ||
      (a === 169 && b === 254);
  }
  const lower = ip.toLowerCase();
  return lower.startsWith("fc") || lower.startsWith("fd") || lower.startsWith("fe80:");
}

/** A dotted-quad IPv4 or a textual IPv6 address (RFC 4291 §2.2, IPv4 tail allowed). */
function isIpAddress(entry: string): boolean {
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(entry) ||
    (entry.length <= 45 && entry.includes(":") && /^[0-9a-f:.]+$/.test(entry));
}

function normalize(entry: string): string {
  // "[2001:db8::1]:443" or "203.0.113.7:8080" → the bare address.
  const bracketed = entry.match(/^\[([^\]]+)\](?::\d+)?$/);
  if (bracketed) return bracketed[1].toLowerCase();
  const v4WithPort = entry.match(/^(\d+\.\d+\.\d+\.\d+):\d+$/);
  return v4WithPort ? v4WithPort[1] : entry.toLowerCase();
}
