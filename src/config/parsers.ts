/**
 * Parsers of environment variable text: each turns a variable's text into its value or throws
 * a ConfigError naming the variable. The service's table and `createResourceGuard`'s options
 * share them.
 */

import { parseCidr } from "../http/ip_address.ts";
import { isWebUrl, parseUrl } from "../http/web_url.ts";
import { ConfigError, type Parser } from "./variable.ts";

import type { RateLimit } from "../http/rate_limit.ts";

export type { RateLimit };

/** The one rule for every secret and key: at least this many bytes (256 bits of text). */
export const MIN_SECRET_BYTES = 32;

export const LOOPBACK_RANGES = ["127.0.0.0/8", "::1/128"] as const;

export const text: Parser<string> = (_name, raw) => raw;

export function integerBetween(min: number, max: number): Parser<number> {
  return (name, raw) => parseInteger(name, raw, min, max);
}

/** A decimal number (`5`, `0.5`) between `min` (exclusive) and `max`. */
export function decimalAbove(min: number, max: number): Parser<number> {
  return (name, raw) => {
    const value = /^\d+(\.\d+)?$/.test(raw) ? Number(raw) : NaN;
    if (!(value > min && value <= max)) {
      throw new ConfigError(
        name,
        `must be a number above ${min} and at most ${max}, got ${JSON.stringify(raw)}`,
      );
    }
    return value;
  };
}

export function oneOf<T extends string>(...choices: T[]): Parser<T> {
  return (name, raw) => parseChoice(name, raw, choices);
}

export function caseInsensitive<T>(parse: Parser<T>): Parser<T> {
  return (name, raw) => parse(name, raw.toLowerCase());
}

export function urlWithoutTrailingSlash(name: string, raw: string): string {
  return parseHttpUrl(name, raw).href.replace(/\/+$/, "");
}

export function parseSecret(name: string, raw: string): string {
  if (new TextEncoder().encode(raw).length < MIN_SECRET_BYTES) {
    throw new ConfigError(name, `must be at least ${MIN_SECRET_BYTES} bytes long`);
  }
  return raw;
}

export function parseChoice<T extends string>(name: string, raw: string, choices: readonly T[]): T {
  if ((choices as readonly string[]).includes(raw)) return raw as T;
  throw new ConfigError(name, `must be one of ${choices.join(", ")}, got ${JSON.stringify(raw)}`);
}

/**
 * The most requests and the longest window a rate limit may have: a window's records expire with
 * it, and a store refuses an expiry past 2^64 ms (every limited request would answer 500).
 */
export const MAX_RATE_LIMIT_REQUESTS = 1_000_000_000;
export const MAX_RATE_LIMIT_SECONDS = 365 * 86_400;

export function parseRateLimit(name: string, raw: string): RateLimit | undefined {
  if (raw.toLowerCase() === "off") return undefined;
  const match = raw.match(/^(\d+)\/(\d+)$/);
  const [limit, windowSeconds] = match ? [Number(match[1]), Number(match[2])] : [0, 0];
  if (
    !between(limit, 1, MAX_RATE_LIMIT_REQUESTS) ||
    !between(windowSeconds, 1, MAX_RATE_LIMIT_SECONDS)
  ) {
    throw new ConfigError(
      name,
      `must be "<requests>/<seconds>" (requests 1 to ${MAX_RATE_LIMIT_REQUESTS}, seconds 1 to ` +
        `${MAX_RATE_LIMIT_SECONDS}) or "off", got ${JSON.stringify(raw)}`,
    );
  }
  return { limit, windowSeconds };
}

function between(value: number, min: number, max: number): boolean {
  return value >= min && value <= max;
}

/** `[::1]` as Deno.serve takes it: `::1`. */
export function unbracketed(_name: string, raw: string): string {
  return raw.replace(/^\[(.*)\]$/, "$1");
}

/** HOSTNAME as a listen address when it is one; a machine name is ignored, not an error. */
export function addressOrIgnored(name: string, raw: string): string | undefined {
  const address = unbracketed(name, raw);
  return address === "localhost" || isIpLiteral(address) ? address : undefined;
}

export function isIpLiteral(text: string): boolean {
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(text)) {
    return text.split(".").every((part) => Number(part) <= 255);
  }
  if (!text.includes(":")) return false;
  try {
    return new URL(`http://[${text}]/`).hostname !== "";
  } catch {
    return false;
  }
}

export function parseInteger(name: string, raw: string, min: number, max: number): number {
  if (!/^\d+$/.test(raw)) {
    throw new ConfigError(name, `must be a whole number, got ${JSON.stringify(raw)}`);
  }
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}`);
  return n;
}

export function parseHttpUrl(name: string, raw: string): URL {
  const url = parseHttpUrlWithQuery(name, raw);
  // `search` is "" for a bare `?` too, which `href` keeps: an issuer of `https://host/?`.
  if (url.href.includes("?")) throw new ConfigError(name, "must not have a query or fragment");
  return url;
}

/**
 * An http(s) URL that may carry a query (an MCP server may take its tenant or key there), never
 * a fragment.
 */
export function parseHttpUrlWithQuery(name: string, raw: string): URL {
  const url = parseUrl(raw);
  if (!url) {
    throw new ConfigError(name, `is not a valid URL: ${JSON.stringify(withoutUserinfo(raw))}`);
  }
  if (!isWebUrl(url)) throw new ConfigError(name, "must be an http or https URL");
  // `hash` is "" for a bare `#` too, which `href` keeps (`https://host/#/token`); in `href` a
  // `#` or `?` is always a delimiter (anywhere else it is percent-encoded).
  if (url.href.includes("#")) throw new ConfigError(name, "must not have a query or fragment");
  // fetch refuses such a URL, and logs and pages would show its password: never echoed here.
  if (url.username || url.password) {
    throw new ConfigError(name, "must not carry a user name or password");
  }
  return url;
}

/** TRUST_PROXY as ranges: `true` is loopback (a proxy on this host), `false` none. */
export function parseTrustProxy(name: string, raw: string): readonly string[] {
  const lower = raw.toLowerCase();
  if (["0", "false", "no", "off"].includes(lower)) return [];
  if (["1", "true", "yes", "on"].includes(lower)) return LOOPBACK_RANGES;
  return cidrList(name, raw, "true, false or CIDRs like 10.0.0.0/8");
}

/** A comma list of CIDRs (a bare address is a range of one) as canonical ranges; `none`: none. */
export function parseCidrs(name: string, raw: string): readonly string[] {
  if (raw.toLowerCase() === "none") return [];
  return cidrList(name, raw, "none or CIDRs like 203.0.113.7/32,2001:db8:7::/48");
}

function cidrList(name: string, raw: string, expected: string): string[] {
  return raw.split(",").map((entry) => {
    const cidr = parseCidr(entry.trim());
    if (cidr === undefined) {
      throw new ConfigError(name, `must be ${expected}, got ${JSON.stringify(entry.trim())}`);
    }
    return cidr;
  });
}

export function parseBoolean(name: string, raw: string): boolean {
  const lower = raw.toLowerCase();
  if (["1", "true", "yes", "on"].includes(lower)) return true;
  if (["0", "false", "no", "off"].includes(lower)) return false;
  throw new ConfigError(name, `must be true or false, got ${JSON.stringify(raw)}`);
}

/**
 * `text` with the user name and password of every URL in it shown as `****`: a URL variable
 * carrying credentials is refused, but what it carries is a secret all the same. In a URL that
 * parses they end at the last `@` before the path (a password may hold one).
 */
export function withoutUserinfo(text: string): string {
  return text.replace(/\b[a-z][a-z0-9+.-]*:\/\/[^"\n]*/gi, maskedUserinfo);
}

/** `run` (a URL and what follows it on its line) with the URL's user info as `****`. */
function maskedUserinfo(run: string): string {
  const url = [run.split(/\s/, 1)[0], run].find((candidate) => URL.canParse(candidate));
  // One that does not parse may owe it to a password holding `/`, `?`, `#` or a space: then
  // what is before its last `@` may all be the password.
  if (url === undefined) return run.replace(/(?<=:\/\/).*@/, "****@");
  return url.replace(/(?<=:\/\/)[^/?#\\]*@/, "****@") + withoutUserinfo(run.slice(url.length));
}
