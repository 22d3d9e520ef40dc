/**
 * Configuration from the environment, validated once at start-up. Nothing else reads the
 * environment.
 *
 * @see README.md "Configuration"
 */

import { NEVER_FORWARDED_HEADERS } from "./gateway/headers.ts";
import { parseCidr } from "./http/ip_address.ts";
import { redirectPatternProblem } from "./clients/redirect_allow_list.ts";

/** A fixed-window limit: at most `limit` requests per `windowSeconds`. */
export interface RateLimit {
  limit: number;
  windowSeconds: number;
}

/** The parts of Config that make OAuth work; both must be present. */
export interface OAuthSettings {
  gitlabClientId: string;
  jwtSecret: string;
}

/** A configuration value is present but wrong; start-up stops with this one-line message. */
export class ConfigError extends Error {
  constructor(readonly variable: string, problem: string) {
    super(`${variable}: ${problem}`);
    this.name = "ConfigError";
  }
}

const MIN_SECRET_BYTES = 32;
const LOOPBACK_RANGES = ["127.0.0.0/8", "::1/128"] as const;

/** The environment as given to loadConfig: a variable may be absent. */
export type Env = Record<string, string | undefined>;

/** Turns a variable's text into its value, or throws a ConfigError naming the variable. */
type Parser<T> = (name: string, raw: string) => T;

/** One environment variable: its name, default, meaning, and how it is read. */
export interface ConfigVariable<T> {
  readonly name: string;
  /** The text used when the variable is unset or blank; undefined: none. */
  readonly defaultValue: string | undefined;
  /** The default exactly as README.md's configuration table shows it. */
  readonly shownDefault: string;
  /** One line, as in README.md's configuration table. */
  readonly meaning: string;
  /** The value in `env`, the default when unset or blank. Throws ConfigError. */
  read(env: Env): T;
}

/** Config fields, each an environment variable or a group of them (a nested object). */
type ConfigTable = { readonly [field: string]: ConfigVariable<unknown> | ConfigTable };

type ValueOf<Entry> = Entry extends ConfigVariable<infer T> ? T
  : Entry extends ConfigTable ? ValuesOf<Entry>
  : never;

/** What a table reads to: a field may be left out exactly when its value may be undefined. */
type ValuesOf<Table extends ConfigTable> = Flatten<
  & { -readonly [K in keyof Table as RequiredKey<Table, K>]: ValueOf<Table[K]> }
  & { -readonly [K in keyof Table as OptionalKey<Table, K>]?: ValueOf<Table[K]> }
>;

type OptionalKey<Table, K extends keyof Table> = undefined extends ValueOf<Table[K]> ? K : never;
type RequiredKey<Table, K extends keyof Table> = undefined extends ValueOf<Table[K]> ? never : K;

type Flatten<T> = { [K in keyof T]: T[K] };

/** A variable with a default: never undefined. */
function variable<T>(
  name: string,
  defaultValue: string,
  parse: Parser<T>,
  meaning: string,
  shownDefault?: string,
): ConfigVariable<T>;
/** A variable without a default: undefined when unset or blank. */
function variable<T>(
  name: string,
  defaultValue: undefined,
  parse: Parser<T>,
  meaning: string,
  shownDefault?: string,
): ConfigVariable<T | undefined>;
function variable<T>(
  name: string,
  defaultValue: string | undefined,
  parse: Parser<T>,
  meaning: string,
  shownDefault = defaultValue === undefined ? "none" : `\`${defaultValue}\``,
): ConfigVariable<T | undefined> {
  return {
    name,
    defaultValue,
    shownDefault,
    meaning,
    read(env) {
      const raw = env[name]?.trim() || defaultValue;
      return raw === undefined ? undefined : parse(name, raw);
    },
  };
}

const text: Parser<string> = (_name, raw) => raw;

function integerBetween(min: number, max: number): Parser<number> {
  return (name, raw) => parseInteger(name, raw, min, max);
}

function oneOf<T extends string>(...choices: T[]): Parser<T> {
  return (name, raw) => parseChoice(name, raw, choices);
}

function caseInsensitive<T>(parse: Parser<T>): Parser<T> {
  return (name, raw) => parse(name, raw.toLowerCase());
}

function urlWithoutTrailingSlash(name: string, raw: string): string {
  return parseHttpUrl(name, raw).href.replace(/\/+$/, "");
}

/**
 * Every environment variable the service reads, keyed by its Config field. Adding a variable is
 * one entry here and one row in README.md's configuration table (a test compares the two).
 */
export const CONFIG_VARIABLES = {
  // The OAuth settings first: when several values are wrong, JWT_SECRET's error is reported.
  /** Absent: the service starts but every operation answers 500 (spec §1.7). */
  gitlabClientId: variable("GITLAB_CLIENT_ID", undefined, text, "GitLab OAuth application id"),
  /** Absent: as gitlabClientId. */
  jwtSecret: variable(
    "JWT_SECRET",
    undefined,
    parseSecret,
    "HS256 signing secret, at least 32 bytes",
  ),
  port: variable("PORT", "8000", integerBetween(0, 65535), "port to listen on"),
  /** Undefined: HOSTNAME when it names an address, else every interface (`listenHostname`). */
  host: variable("HOST", undefined, unbracketed, "address to listen on", "`0.0.0.0`"),
  /**
   * Read only when it is an IP literal or `localhost`: shells and container runtimes set it to
   * the machine's name, which would bind the service to that one address.
   */
  hostname: variable(
    "HOSTNAME",
    undefined,
    addressOrIgnored,
    "older name of `HOST`, honoured only as an IP address or `localhost`; `HOST` wins",
  ),
  gitlabUrl: variable(
    "GITLAB_URL",
    "https://gitlab.com",
    parseHttpUrl,
    "GitLab instance (self-hosted too, with or without a sub-path)",
  ),
  gitlabScopes: variable("GITLAB_SCOPES", "api", text, "scopes asked of GitLab"),
  /** `device`: the spec's device flow; `redirect`: consent page and GitLab's redirect sign-in. */
  gitlabSignIn: variable(
    "GITLAB_SIGN_IN",
    "device",
    caseInsensitive(oneOf("device", "redirect")),
    "`redirect`: GitLab's redirect sign-in with our consent page ([why](#redirect-sign-in))",
  ),
  /** A confidential GitLab application's secret (redirect sign-in only); a secret: never logged. */
  gitlabClientSecret: variable(
    "GITLAB_CLIENT_SECRET",
    undefined,
    text,
    "redirect sign-in: the secret of a confidential GitLab application",
  ),
  accessTokenTtlSeconds: variable(
    "ACCESS_TOKEN_TTL",
    "3600",
    integerBetween(1, 86_400 * 365),
    "access-token lifetime in seconds (`expires_in`)",
  ),
  /** Sessions unused this long are forgotten; renewed by every refresh. */
  sessionIdleTtlSeconds: variable(
    "SESSION_IDLE_TTL",
    String(30 * 86_400),
    integerBetween(60, 86_400 * 3650),
    "a session unused this long is forgotten; every refresh renews it",
    "`2592000` (30 days)",
  ),
  upstreamTimeoutMs: variable(
    "UPSTREAM_TIMEOUT_MS",
    "10000",
    integerBetween(1, 600_000),
    "time limit of every call to GitLab",
  ),
  /** Undefined: Deno's default KV location. */
  kvPath: variable(
    "KV_PATH",
    undefined,
    text,
    "file path, `:memory:`, or a KV Connect URL",
    "Deno's default `Deno.openKv()`",
  ),
  /** Overrides the base URL (issuer) otherwise derived from each request. No trailing slash. */
  baseUrl: variable(
    "BASE_URL",
    undefined,
    urlWithoutTrailingSlash,
    "issuer and base URL override (no trailing slash needed)",
    "from the request",
  ),
  /** Ranges of the proxies whose `X-Forwarded-*` headers count (canonical CIDRs; none: off). */
  trustProxy: variable(
    "TRUST_PROXY",
    "false",
    parseTrustProxy,
    "proxies whose `X-Forwarded-*` count: `true` (loopback) or CIDRs; needs `BASE_URL`",
  ),
  /**
   * The protected MCP resource (RFC 9728 `resource`), without a trailing slash. Undefined:
   * `{base}/mcp`, derived like the issuer.
   */
  mcpResourceUrl: variable(
    "MCP_RESOURCE_URL",
    undefined,
    urlWithoutTrailingSlash,
    "the protected MCP server (RFC 9728 `resource`)",
    "`{base}/mcp`",
  ),
  /** `any`: the spec's behaviour; `registered`: redirect URIs must be registered (RFC 7591). */
  redirectUriPolicy: variable(
    "REDIRECT_URI_POLICY",
    "any",
    oneOf("any", "registered"),
    "`registered`: only registered clients and their redirect URIs ([why](#redirect-uri-policy))",
    "`any` (strict: `registered`)",
  ),
  /** `client`: `aud` is the client id (the spec); `resource`: the MCP server's URL (RFC 9068). */
  accessTokenAudience: variable(
    "ACCESS_TOKEN_AUDIENCE",
    "client",
    oneOf("client", "resource"),
    "`resource`: `aud` is the MCP server URL ([trade-off](#resource-indicators-rfc-8707))",
  ),
  /** Redirect URI patterns every client must use; undefined: any (the spec). */
  allowedRedirectUris: variable(
    "ALLOWED_REDIRECT_URIS",
    undefined,
    parseRedirectPatterns,
    "comma list of redirect URIs clients may use ([allow-list](#client-allow-list))",
    "any",
  ),
  /** Lifts the SSRF guard on metadata document fetches (intranets, tests). */
  clientMetadataAllowPrivate: variable(
    "CLIENT_METADATA_ALLOW_PRIVATE",
    "false",
    parseBoolean,
    "fetch metadata documents from private addresses too ([CIMD](#client-id-metadata-documents))",
  ),
  /** Gateway mode: where authenticated MCP requests are forwarded. Undefined: no gateway. */
  mcpUpstreamUrl: variable(
    "MCP_UPSTREAM_URL",
    undefined,
    parseHttpUrl,
    "gateway mode: where authenticated MCP requests go",
  ),
  /** How the gateway hands the MCP server the user's GitLab token. */
  mcpUpstreamTokenHeader: variable(
    "MCP_UPSTREAM_TOKEN_HEADER",
    "authorization",
    caseInsensitive(oneOf("authorization", "private-token")),
    "gateway: `private-token` sends `PRIVATE-TOKEN` instead of a Bearer",
  ),
  /**
   * Client headers the gateway passes on beyond its own list (lower case); never a credential.
   * Undefined: none.
   */
  mcpUpstreamForwardHeaders: variable(
    "MCP_UPSTREAM_FORWARD_HEADERS",
    undefined,
    parseForwardHeaders,
    "gateway: more client headers to pass on, comma-separated ([which](#the-gateways-headers))",
  ),
  /** How long the gateway waits for the MCP server's response headers. */
  mcpUpstreamTimeoutMs: variable(
    "MCP_UPSTREAM_TIMEOUT_MS",
    "30000",
    integerBetween(1, 3_600_000),
    "gateway: time limit for the MCP server's response headers",
  ),
  /** Per-client-IP limits; undefined when `off`. */
  rateLimits: {
    authorize: variable(
      "RATE_LIMIT_AUTHORIZE",
      "30/600",
      parseRateLimit,
      "per client IP: requests / seconds, or `off`",
    ),
    poll: variable("RATE_LIMIT_POLL", "120/60", parseRateLimit, "the same for `/oauth/poll`"),
    token: variable(
      "RATE_LIMIT_TOKEN",
      "300/600",
      parseRateLimit,
      "the same for `/token` and `/revoke`",
    ),
    register: variable(
      "RATE_LIMIT_REGISTER",
      "20/3600",
      parseRateLimit,
      "the same for `/register`",
    ),
  },
  /** `exempt`: loopback clients are never limited; `limit`: they are, like everyone. */
  rateLimitLoopback: variable(
    "RATE_LIMIT_LOOPBACK",
    "exempt",
    oneOf("exempt", "limit"),
    "`limit`: loopback clients are limited too",
  ),
  /** Key for GitLab tokens at rest (AES-GCM); undefined: derived from JWT_SECRET with HKDF. */
  encryptionKey: variable(
    "ENCRYPTION_KEY",
    undefined,
    parseSecret,
    "key (≥ 32 bytes) for GitLab tokens at rest",
    "derived from `JWT_SECRET`",
  ),
  /** A retired signing secret whose tokens are still accepted while they live. */
  jwtSecretPrevious: variable(
    "JWT_SECRET_PREVIOUS",
    undefined,
    parseSecret,
    "the secret before a rotation: its tokens and stored sessions stay valid",
  ),
  /** Opt-in: a client that lost a refresh response may retry the old token this long. 0: off. */
  refreshGraceSeconds: variable(
    "REFRESH_GRACE_SECONDS",
    "0",
    integerBetween(0, 3600),
    "opt-in, see [Opt-in policies](#opt-in-policies)",
    "`0` (off)",
  ),
  /** Opt-in: replaying a used authorization code revokes the session it created. */
  revokeOnCodeReplay: variable(
    "REVOKE_ON_CODE_REPLAY",
    "false",
    parseBoolean,
    "opt-in, see [Opt-in policies](#opt-in-policies)",
    "`false` (strict: `true`)",
  ),
  /** Opt-in: presenting a rotated refresh token again ends its session (RFC 9700 §4.14.2). */
  revokeOnRefreshReplay: variable(
    "REVOKE_ON_REFRESH_REPLAY",
    "false",
    parseBoolean,
    "opt-in, see [Opt-in policies](#opt-in-policies)",
    "`false` (strict: `true`)",
  ),
  /** `spec`: the spec to the letter; `strict`: the production defaults of PROFILE_DEFAULTS. */
  securityProfile: variable(
    "SECURITY_PROFILE",
    "spec",
    caseInsensitive(oneOf("spec", "strict")),
    "`strict`: production defaults, see [Security profile](#security-profile)",
  ),
  /** A request body not received completely within this answers 408. */
  requestBodyTimeoutMs: variable(
    "REQUEST_BODY_TIMEOUT_MS",
    "10000",
    integerBetween(1, 600_000),
    "time limit for receiving a request body (then 408)",
  ),
} satisfies ConfigTable;

/** The security profiles: `spec` (the default) and `strict`. */
export type SecurityProfile = "spec" | "strict";

/**
 * The defaults each profile gives the variables it governs (explicit values win). `strict`
 * closes what the spec leaves open: unregistered redirect URIs and replayed codes and refresh
 * tokens.
 *
 * @see README.md "Security profile", RFC 9700 §2.1 and §4.14.2
 */
export const PROFILE_DEFAULTS: Readonly<Record<SecurityProfile, Readonly<Env>>> = {
  spec: {},
  strict: {
    REDIRECT_URI_POLICY: "registered",
    REVOKE_ON_CODE_REPLAY: "true",
    REVOKE_ON_REFRESH_REPLAY: "true",
  },
};

/** Everything the service is configured with: one field per entry of CONFIG_VARIABLES. */
export type Config = ValuesOf<typeof CONFIG_VARIABLES>;

/** The limit of each rate-limited endpoint family. */
export type RateLimits = Config["rateLimits"];

/**
 * Reads and validates the configuration from an environment map. SECURITY_PROFILE supplies the
 * defaults of the variables it governs; a variable set explicitly wins. Throws ConfigError.
 */
export function loadConfig(env: Env): Config {
  const profile = CONFIG_VARIABLES.securityProfile.read(env);
  const config = readTable(CONFIG_VARIABLES, withProfileDefaults(profile, env));
  requireBaseUrlBehindProxy(config);
  requireProfileSettings(config);
  return config;
}

/**
 * Behind a proxy the issuer is not taken from forwarded headers: a proxy that passes a client's
 * `X-Forwarded-Host` on would let it choose the issuer of tokens and metadata.
 */
function requireBaseUrlBehindProxy(config: Config): void {
  if (config.trustProxy.length > 0 && !config.baseUrl) {
    throw new ConfigError("TRUST_PROXY", "needs BASE_URL: set BASE_URL to the public base URL");
  }
}

/** Every variable of CONFIG_VARIABLES, groups flattened, in table order. */
export function listConfigVariables(): ConfigVariable<unknown>[] {
  return variablesOf(CONFIG_VARIABLES);
}

/** The environment with the profile's defaults filled in where a variable is unset or blank. */
function withProfileDefaults(profile: SecurityProfile, env: Env): Env {
  const filled: Env = { ...env };
  for (const [name, value] of Object.entries(PROFILE_DEFAULTS[profile])) {
    if (!env[name]?.trim()) filled[name] = value;
  }
  return filled;
}

/** What a profile cannot run without. */
function requireProfileSettings(config: Config): void {
  if (config.securityProfile === "strict" && !config.baseUrl) {
    throw new ConfigError("BASE_URL", "is required with SECURITY_PROFILE=strict");
  }
}

function variablesOf(table: ConfigTable): ConfigVariable<unknown>[] {
  return Object.values(table).flatMap((entry) => isVariable(entry) ? [entry] : variablesOf(entry));
}

function readTable<Table extends ConfigTable>(table: Table, env: Env): ValuesOf<Table> {
  const fields = Object.entries(table).map(([field, entry]) => [field, readEntry(entry, env)]);
  // Object.fromEntries cannot carry per-field types; each field is read by its own entry.
  return Object.fromEntries(fields) as ValuesOf<Table>;
}

function readEntry(entry: ConfigVariable<unknown> | ConfigTable, env: Env): unknown {
  return isVariable(entry) ? entry.read(env) : readTable(entry, env);
}

function isVariable(
  entry: ConfigVariable<unknown> | ConfigTable,
): entry is ConfigVariable<unknown> {
  return typeof entry.read === "function";
}

function parseSecret(name: string, raw: string): string {
  if (new TextEncoder().encode(raw).length < MIN_SECRET_BYTES) {
    throw new ConfigError(name, `must be at least ${MIN_SECRET_BYTES} bytes long`);
  }
  return raw;
}

function parseChoice<T extends string>(name: string, raw: string, choices: readonly T[]): T {
  if ((choices as readonly string[]).includes(raw)) return raw as T;
  throw new ConfigError(name, `must be one of ${choices.join(", ")}, got ${JSON.stringify(raw)}`);
}

function parseRateLimit(name: string, raw: string): RateLimit | undefined {
  if (raw.toLowerCase() === "off") return undefined;
  const match = raw.match(/^(\d+)\/(\d+)$/);
  if (!match || Number(match[1]) < 1 || Number(match[2]) < 1) {
    throw new ConfigError(
      name,
      `must be "<requests>/<seconds>" or "off", got ${JSON.stringify(raw)}`,
    );
  }
  return { limit: Number(match[1]), windowSeconds: Number(match[2]) };
}

/** Where the service listens: `HOST`, else an address-like `HOSTNAME`, else every interface. */
export function listenHostname(config: Config): string {
  return config.host ?? config.hostname ?? "0.0.0.0";
}

/** `[::1]` as Deno.serve takes it: `::1`. */
function unbracketed(_name: string, raw: string): string {
  return raw.replace(/^\[(.*)\]$/, "$1");
}

/** HOSTNAME as a listen address when it is one; a machine name is ignored, not an error. */
function addressOrIgnored(name: string, raw: string): string | undefined {
  const address = unbracketed(name, raw);
  return address === "localhost" || isIpLiteral(address) ? address : undefined;
}

function isIpLiteral(text: string): boolean {
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

/** The OAuth settings when both are configured, otherwise undefined. */
export function oauthSettings(config: Config): OAuthSettings | undefined {
  const { gitlabClientId, jwtSecret } = config;
  return gitlabClientId && jwtSecret ? { gitlabClientId, jwtSecret } : undefined;
}

/** A year: browsers keep to https for this long after one visit (RFC 6797 §6.1.1). */
const HSTS_MAX_AGE_SECONDS = 365 * 86_400;

/**
 * The `Strict-Transport-Security` value to send: under the strict profile when BASE_URL is
 * https, otherwise none (over plain http browsers ignore it, and the spec profile adds nothing).
 *
 * @see RFC 6797 §6.1
 */
export function strictTransportSecurity(config: Config): string | undefined {
  const https = config.baseUrl?.startsWith("https:");
  return config.securityProfile === "strict" && https
    ? `max-age=${HSTS_MAX_AGE_SECONDS}`
    : undefined;
}

/** The JWT secrets, current first: the first signs, all verify. */
export function jwtSecrets(settings: OAuthSettings, config: Config): string[] {
  return [settings.jwtSecret, ...(config.jwtSecretPrevious ? [config.jwtSecretPrevious] : [])];
}

/** The one warning main.ts logs when OAuth is not configured, naming what is missing. */
export function missingOAuthSettings(config: Config): string[] {
  return [
    ...(config.gitlabClientId ? [] : ["GITLAB_CLIENT_ID"]),
    ...(config.jwtSecret ? [] : ["JWT_SECRET"]),
  ];
}

function parseInteger(name: string, raw: string, min: number, max: number): number {
  if (!/^\d+$/.test(raw)) {
    throw new ConfigError(name, `must be a whole number, got ${JSON.stringify(raw)}`);
  }
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}`);
  return n;
}

function parseHttpUrl(name: string, raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(name, `is not a valid URL: ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(name, "must be an http or https URL");
  }
  if (url.search || url.hash) throw new ConfigError(name, "must not have a query or fragment");
  return url;
}

/** TRUST_PROXY as ranges: `true` is loopback (a proxy on this host), `false` none. */
function parseTrustProxy(name: string, raw: string): readonly string[] {
  const lower = raw.toLowerCase();
  if (["0", "false", "no", "off"].includes(lower)) return [];
  if (["1", "true", "yes", "on"].includes(lower)) return LOOPBACK_RANGES;
  return raw.split(",").map((entry) => {
    const cidr = parseCidr(entry.trim());
    if (cidr === undefined) {
      throw new ConfigError(
        name,
        `must be true, false or CIDRs like 10.0.0.0/8, got ${JSON.stringify(entry.trim())}`,
      );
    }
    return cidr;
  });
}

/** Header names only; no header that carries a credential or frames the message. */
function parseForwardHeaders(name: string, raw: string): readonly string[] {
  return raw.split(",").map((entry) => entry.trim().toLowerCase()).filter((entry) => entry)
    .map((header) => {
      if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(header)) {
        throw new ConfigError(name, `${JSON.stringify(header)} is not a header name`);
      }
      if (NEVER_FORWARDED_HEADERS.has(header) || header.startsWith("proxy-")) {
        throw new ConfigError(name, `must not name ${header}: the gateway never forwards it`);
      }
      return header;
    });
}

function parseRedirectPatterns(name: string, raw: string): string[] {
  const patterns = raw.split(",").map((item) => item.trim()).filter((item) => item !== "");
  for (const pattern of patterns) {
    const problem = redirectPatternProblem(pattern);
    if (problem) throw new ConfigError(name, `${JSON.stringify(pattern)}: ${problem}`);
  }
  if (patterns.length === 0) throw new ConfigError(name, "lists no redirect URI");
  return patterns;
}

function parseBoolean(name: string, raw: string): boolean {
  const lower = raw.toLowerCase();
  if (["1", "true", "yes", "on"].includes(lower)) return true;
  if (["0", "false", "no", "off"].includes(lower)) return false;
  throw new ConfigError(name, `must be true or false, got ${JSON.stringify(raw)}`);
}
