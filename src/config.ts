/**
 * Configuration from the environment, validated once at start-up. Nothing else reads the
 * environment.
 *
 * @see README.md "Configuration"
 */

/** Everything the service is configured with. */
export interface Config {
  port: number;
  hostname: string;
  gitlabUrl: URL;
  /** Absent: the service starts but every operation answers 500 (spec §1.7). */
  gitlabClientId?: string;
  gitlabScopes: string;
  /** Absent: as gitlabClientId. */
  jwtSecret?: string;
  accessTokenTtlSeconds: number;
  /** Sessions unused this long are forgotten; renewed by every refresh. */
  sessionIdleTtlSeconds: number;
  upstreamTimeoutMs: number;
  /** Undefined: Deno's default KV location. */
  kvPath?: string;
  /** Overrides the base URL (issuer) otherwise derived from each request. No trailing slash. */
  baseUrl?: string;
  trustProxy: boolean;
  /**
   * The protected MCP resource (RFC 9728 `resource`), without a trailing slash. Undefined:
   * `{base}/mcp`, derived like the issuer.
   */
  mcpResourceUrl?: string;
  /** `any`: the spec's behaviour; `registered`: redirect URIs must be registered (RFC 7591). */
  redirectUriPolicy: "any" | "registered";
  /** Gateway mode: where authenticated MCP requests are forwarded. Undefined: no gateway. */
  mcpUpstreamUrl?: URL;
  /** How the gateway hands the MCP server the user's GitLab token. */
  mcpUpstreamTokenHeader: "authorization" | "private-token";
  /** How long the gateway waits for the MCP server's response headers. */
  mcpUpstreamTimeoutMs: number;
  /** Per-client-IP limits; undefined when `off`. */
  rateLimits: RateLimits;
  /** `exempt`: loopback clients are never limited; `limit`: they are, like everyone. */
  rateLimitLoopback: "exempt" | "limit";
  /** Key for GitLab tokens at rest (AES-GCM); undefined: derived from JWT_SECRET with HKDF. */
  encryptionKey?: string;
  /** A retired signing secret whose tokens are still accepted while they live. */
  jwtSecretPrevious?: string;
  /** Opt-in: a client that lost a refresh response may retry the old token this long. 0: off. */
  refreshGraceSeconds: number;
  /** Opt-in: replaying a used authorization code revokes the session it created. */
  revokeOnCodeReplay: boolean;
}

/** A fixed-window limit: at most `limit` requests per `windowSeconds`. */
export interface RateLimit {
  limit: number;
  windowSeconds: number;
}

/** The limit of each rate-limited endpoint family. */
export interface RateLimits {
  authorize?: RateLimit;
  poll?: RateLimit;
  token?: RateLimit;
  register?: RateLimit;
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

/** Reads and validates the configuration from an environment map. Throws ConfigError. */
export function loadConfig(env: Record<string, string | undefined>): Config {
  const value = (name: string) => {
    const raw = env[name]?.trim();
    return raw === "" ? undefined : raw;
  };
  const jwtSecret = optional(value("JWT_SECRET"), (raw) => parseSecret("JWT_SECRET", raw));
  return {
    port: parseInteger("PORT", value("PORT") ?? "8000", 0, 65535),
    hostname: value("HOSTNAME") ?? "0.0.0.0",
    gitlabUrl: parseHttpUrl("GITLAB_URL", value("GITLAB_URL") ?? "https://gitlab.com"),
    gitlabClientId: value("GITLAB_CLIENT_ID"),
    gitlabScopes: value("GITLAB_SCOPES") ?? "api",
    jwtSecret,
    accessTokenTtlSeconds: parseInteger(
      "ACCESS_TOKEN_TTL",
      value("ACCESS_TOKEN_TTL") ?? "3600",
      1,
      86_400 * 365,
    ),
    sessionIdleTtlSeconds: parseInteger(
      "SESSION_IDLE_TTL",
      value("SESSION_IDLE_TTL") ?? String(30 * 86_400),
      60,
      86_400 * 3650,
    ),
    upstreamTimeoutMs: parseInteger(
      "UPSTREAM_TIMEOUT_MS",
      value("UPSTREAM_TIMEOUT_MS") ?? "10000",
      1,
      600_000,
    ),
    kvPath: value("KV_PATH"),
    baseUrl: parseBaseUrl(value("BASE_URL")),
    trustProxy: parseBoolean("TRUST_PROXY", value("TRUST_PROXY") ?? "false"),
    mcpResourceUrl: optional(
      value("MCP_RESOURCE_URL"),
      (raw) => parseHttpUrl("MCP_RESOURCE_URL", raw).href.replace(/\/+$/, ""),
    ),
    redirectUriPolicy: parseChoice(
      "REDIRECT_URI_POLICY",
      value("REDIRECT_URI_POLICY") ?? "any",
      ["any", "registered"] as const,
    ),
    mcpUpstreamUrl: optional(
      value("MCP_UPSTREAM_URL"),
      (raw) => parseHttpUrl("MCP_UPSTREAM_URL", raw),
    ),
    mcpUpstreamTokenHeader: parseChoice(
      "MCP_UPSTREAM_TOKEN_HEADER",
      (value("MCP_UPSTREAM_TOKEN_HEADER") ?? "authorization").toLowerCase(),
      ["authorization", "private-token"] as const,
    ),
    mcpUpstreamTimeoutMs: parseInteger(
      "MCP_UPSTREAM_TIMEOUT_MS",
      value("MCP_UPSTREAM_TIMEOUT_MS") ?? "30000",
      1,
      3_600_000,
    ),
    rateLimits: {
      authorize: parseRateLimit("RATE_LIMIT_AUTHORIZE", value("RATE_LIMIT_AUTHORIZE") ?? "30/600"),
      poll: parseRateLimit("RATE_LIMIT_POLL", value("RATE_LIMIT_POLL") ?? "120/60"),
      token: parseRateLimit("RATE_LIMIT_TOKEN", value("RATE_LIMIT_TOKEN") ?? "300/600"),
      register: parseRateLimit("RATE_LIMIT_REGISTER", value("RATE_LIMIT_REGISTER") ?? "20/3600"),
    },
    rateLimitLoopback: parseChoice(
      "RATE_LIMIT_LOOPBACK",
      value("RATE_LIMIT_LOOPBACK") ?? "exempt",
      ["exempt", "limit"] as const,
    ),
    encryptionKey: optional(value("ENCRYPTION_KEY"), (raw) => parseSecret("ENCRYPTION_KEY", raw)),
    jwtSecretPrevious: optional(
      value("JWT_SECRET_PREVIOUS"),
      (raw) => parseSecret("JWT_SECRET_PREVIOUS", raw),
    ),
    refreshGraceSeconds: parseInteger(
      "REFRESH_GRACE_SECONDS",
      value("REFRESH_GRACE_SECONDS") ?? "0",
      0,
      3600,
    ),
    revokeOnCodeReplay: parseBoolean(
      "REVOKE_ON_CODE_REPLAY",
      value("REVOKE_ON_CODE_REPLAY") ?? "false",
    ),
  };
}

function optional<T>(raw: string | undefined, parse: (raw: string) => T): T | undefined {
  return raw === undefined ? undefined : parse(raw);
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

/** The OAuth settings when both are configured, otherwise undefined. */
export function oauthSettings(config: Config): OAuthSettings | undefined {
  const { gitlabClientId, jwtSecret } = config;
  return gitlabClientId && jwtSecret ? { gitlabClientId, jwtSecret } : undefined;
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

function parseBaseUrl(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  return parseHttpUrl("BASE_URL", raw).href.replace(/\/+$/, "");
}

function parseBoolean(name: string, raw: string): boolean {
  const lower = raw.toLowerCase();
  if (["1", "true", "yes", "on"].includes(lower)) return true;
  if (["0", "false", "no", "off"].includes(lower)) return false;
  throw new ConfigError(name, `must be true or false, got ${JSON.stringify(raw)}`);
}
