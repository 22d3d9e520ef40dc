/**
 * Settings that start but leave the service weaker than its operator likely meant: each is one
 * start-up warning, never a refusal (a test or a closed network may want them).
 *
 * @see docs/security.md "Security profile"
 */

import { createRangeMatcher, isLoopbackIp } from "../http/ip_address.ts";
import {
  type Config,
  isOpenToAnyGitLabComUser,
  isStrictOpenToAnySelfManagedUser,
} from "./config.ts";

/** Fewer distinct characters than this in JWT_SECRET: a placeholder, not a secret. */
const MIN_DISTINCT_SECRET_CHARACTERS = 8;

/**
 * Every warning start-up logs about `config` once read, in its order: who can sign in, then the
 * weak settings (`admin config check` says the same lines).
 */
export function startupWarnings(config: Config): string[] {
  const open = openToAnyone(config);
  return [...(open === undefined ? [] : [open]), ...weakSettings(config)];
}

/** One line per weak setting of `config`, naming the variable and the fix. */
export function weakSettings(config: Config): string[] {
  return [
    weakJwtSecret(config),
    ...bearerTokensThatAreKeys(config),
    plainRedirectBaseUrl(config),
    unencryptedRemoteDatabase(config),
    sweepingRateLimitExemption(config),
    sweepingProxyTrust(config),
    machineClientsWithoutBaseUrl(config),
  ].filter((warning): warning is string => warning !== undefined);
}

/**
 * A bearer token (sent by every scraper or resource server, over the wire, into their
 * configuration) that is also a key: whoever holds it signs tokens or opens GitLab's tokens at
 * rest. One line per token variable, naming the keys it equals, never a value.
 */
function bearerTokensThatAreKeys(config: Config): string[] {
  const keys: [string, string | undefined][] = [
    ["JWT_SECRET", config.jwtSecret],
    ["JWT_SECRET_PREVIOUS", config.jwtSecretPrevious],
    ["ENCRYPTION_KEY", config.encryptionKey],
    ["ENCRYPTION_KEY_PREVIOUS", config.encryptionKeyPrevious],
  ];
  const tokens: [string, readonly string[]][] = [
    ["METRICS_TOKEN", config.metricsToken === undefined ? [] : [config.metricsToken]],
    ["INTROSPECTION_TOKENS", config.introspectionTokens ?? []],
  ];
  return tokens.flatMap(([name, values]) => {
    const equal = keys.filter(([, key]) => key !== undefined && values.includes(key));
    if (equal.length === 0) return [];
    return [
      `${name} holds the value of ${equal.map(([key]) => key).join(" and ")}: every caller ` +
      "sending it as a bearer token holds a key that signs tokens or opens GitLab's tokens at " +
      `rest; give ${name} a value of its own`,
    ];
  });
}

/** No allow-list where anyone can make an account (gitlab.com), or under the strict profile. */
function openToAnyone(config: Config): string | undefined {
  const lists = "set ALLOWED_GITLAB_GROUPS or ALLOWED_GITLAB_USERS (or ALLOW_ANY_GITLAB_USER=true)";
  if (isOpenToAnyGitLabComUser(config)) {
    return `anyone with a gitlab.com account can sign in and use the protected MCP server: ${lists}`;
  }
  if (isStrictOpenToAnySelfManagedUser(config)) {
    return `SECURITY_PROFILE=strict, yet every account of ${config.upstream.url.origin} can sign ` +
      "in and use the protected MCP server (open sign-up, external and guest users included): " +
      lists;
  }
  return undefined;
}

function weakJwtSecret({ jwtSecret }: Config): string | undefined {
  if (jwtSecret === undefined || new Set(jwtSecret).size >= MIN_DISTINCT_SECRET_CHARACTERS) {
    return undefined;
  }
  return `JWT_SECRET has fewer than ${MIN_DISTINCT_SECRET_CHARACTERS} distinct characters: ` +
    "anyone who guesses it can sign tokens; generate one with deno task admin keys generate";
}

/** The redirect sign-in sends GitLab's code and our cookies over BASE_URL: plain http leaks both. */
function plainRedirectBaseUrl({ upstream, baseUrl }: Config): string | undefined {
  if (upstream.signIn !== "redirect" || baseUrl === undefined) return undefined;
  const url = new URL(baseUrl);
  if (url.protocol !== "http:" || isLoopbackHost(url.hostname)) return undefined;
  return `GITLAB_SIGN_IN=redirect with a plain http: BASE_URL (${url.host}): GitLab's ` +
    "authorization codes and the sign-in cookies cross the network unencrypted; use https:";
}

/** A database on another host without `sslmode`: the driver's default may not encrypt. */
function unencryptedRemoteDatabase({ databaseUrl }: Config): string | undefined {
  if (databaseUrl === undefined) return undefined;
  const url = new URL(databaseUrl);
  const socket = url.hostname.startsWith("%2F") || url.searchParams.get("host")?.startsWith("/");
  if (socket || isLoopbackHost(url.hostname) || url.searchParams.has("sslmode")) return undefined;
  return `DATABASE_URL names another host (${url.hostname}) without sslmode: add ` +
    "?sslmode=require (or verify-full) so tokens do not cross the network in clear";
}

/**
 * Machine clients without BASE_URL: those with keys cannot authenticate (private_key_jwt is
 * refused, so the request's Host never names an assertion's audience); secrets still work.
 */
function machineClientsWithoutBaseUrl({ machineAccessFile, baseUrl }: Config): string | undefined {
  if (machineAccessFile === undefined || machineAccessFile.clients.length === 0 || baseUrl) {
    return undefined;
  }
  return "MACHINE_ACCESS_FILE names clients but BASE_URL is unset: private_key_jwt is refused " +
    "(an assertion's aud must name a fixed issuer, not the request's Host); set BASE_URL for " +
    "clients with keys, or use client secrets";
}

/** Prefixes shorter than these span more than any one network's addresses (an IPv4 /8, an IPv6 /16). */
const NARROWEST_SWEEPING_PREFIX = { ipv4: 8, ipv6: 16 } as const;

/** RATE_LIMIT_EXEMPT with a range as wide as `0.0.0.0/0`: the per-address limits are off for nearly everyone. */
function sweepingRateLimitExemption({ rateLimitExempt }: Config): string | undefined {
  const sweeping = sweepingRanges(rateLimitExempt);
  if (sweeping.length === 0) return undefined;
  return `RATE_LIMIT_EXEMPT exempts ${sweeping.join(", ")}: the per-address limits count almost ` +
    "no client; list only the egress addresses you trust (an office's, a NAT's)";
}

/**
 * TRUST_PROXY with a range as wide as `0.0.0.0/0`: every client there is a "proxy", so the address
 * it writes in `X-Forwarded-For` is believed, `127.0.0.1` (exempt from every limit) included.
 */
function sweepingProxyTrust({ trustProxy }: Config): string | undefined {
  // fd00::/8 (this page's own example) is wide, but holds no address a client on the Internet has.
  const sweeping = sweepingRanges(trustProxy).filter((cidr) => !isLocalIpv6(cidr.split("/")[0]));
  if (sweeping.length === 0) return undefined;
  return `TRUST_PROXY trusts ${sweeping.join(", ")}: a client there names its own address in ` +
    "X-Forwarded-For (127.0.0.1 escapes every per-address limit); list only your proxies' addresses";
}

/** The canonical CIDRs of `ranges` wider than any one network's. */
function sweepingRanges(ranges: readonly string[]): string[] {
  return ranges.filter((cidr) => {
    const [address, prefix] = cidr.split("/");
    const kind = address.includes(":") ? "ipv6" : "ipv4";
    return Number(prefix) < NARROWEST_SWEEPING_PREFIX[kind];
  });
}

/** IPv6 unique local (fc00::/7) and link-local (fe80::/10) addresses. */
const isLocalIpv6 = createRangeMatcher(["fc00::/7", "fe80::/10"]);

function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "");
  return host === "localhost" || isLoopbackIp(host);
}
