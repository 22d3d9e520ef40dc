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
  const jwtSecret = value("JWT_SECRET");
  if (jwtSecret !== undefined && new TextEncoder().encode(jwtSecret).length < MIN_SECRET_BYTES) {
    throw new ConfigError("JWT_SECRET", `must be at least ${MIN_SECRET_BYTES} bytes long`);
  }
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
  };
}

/** The OAuth settings when both are configured, otherwise undefined. */
export function oauthSettings(config: Config): OAuthSettings | undefined {
  const { gitlabClientId, jwtSecret } = config;
  return gitlabClientId && jwtSecret ? { gitlabClientId, jwtSecret } : undefined;
}

/** The one warning main.ts logs when OAuth is not configured, naming what is missing. */
export function missingOAuthSettings(config: Config): string[] {
  return [
    ...(config.gitlabClientId ? [] : ["GITLAB_CLIENT_ID"]),
    ...(config.jwtSecret ? [] : ["JWT_SECRET"]),
  ];
}

function parseInteger(name: string, raw: string, min: number, max: number): number {
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}`);
  return n;
}

function parseHttpUrl(name: string, raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(name, `is not a valid URL: "${raw}"`);
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
  throw new ConfigError(name, `must be true or false, got "${raw}"`);
}
