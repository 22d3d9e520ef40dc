/**
 * Configuration from the environment, validated once at start-up. Nothing else reads the
 * environment. The table of variables is in variables.ts, their parsers in parsers.ts.
 *
 * @see README.md "Configuration"
 */

import { CONFIG_VARIABLES, PROFILE_DEFAULTS, type SecurityProfile } from "./variables.ts";
import {
  ConfigError,
  type ConfigVariable,
  type Env,
  readTable,
  type ValuesOf,
  variablesOf,
} from "./variable.ts";

import { requireSigningKeys } from "../keys/signing_config.ts";
import { type AccessPolicy, isRestricted } from "../access/policy.ts";
import { policyGroups } from "../access/call_policy.ts";

export { ConfigError, type ConfigVariable, type Env } from "./variable.ts";
export type { RateLimit } from "./parsers.ts";
export { CONFIG_VARIABLES, PROFILE_DEFAULTS, type SecurityProfile } from "./variables.ts";

/** The parts of Config that make OAuth work; both must be present. */
export interface OAuthSettings {
  /** `upstream.clientId` (GITLAB_CLIENT_ID), known to be set. */
  gitlabClientId: string;
  jwtSecret: string;
}

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
  requireOneStore(config);
  requireSigningKeys(config);
  requireBaseUrlForRedirect(config);
  requireAccessSettings(config);
  return config;
}

/** Who may sign in, as ALLOWED_GITLAB_GROUPS and ALLOWED_GITLAB_USERS say (both empty: anyone). */
export function accessPolicyOf(config: Config): AccessPolicy {
  return { groups: config.access.groups ?? [], users: config.access.users ?? [] };
}

/** GitLab scopes that let a user's token read group memberships. */
const MEMBERSHIP_SCOPES = ["read_api", "api"];

/**
 * The group check reads memberships with the user's own token, which needs `read_api` or
 * `api`; under the strict profile gitlab.com (anyone with an account) needs a list, or
 * ALLOW_ANY_GITLAB_USER=true saying so on purpose.
 */
function requireAccessSettings(config: Config): void {
  const { groups, users, allowAnyUser } = CONFIG_VARIABLES.access;
  if (accessPolicyOf(config).groups.length > 0) requireMembershipScope(config, groups.name);
  const callPolicy = config.mcpPolicyFile?.policy;
  if (callPolicy && policyGroups(callPolicy).length > 0) {
    requireMembershipScope(config, CONFIG_VARIABLES.mcpPolicyFile.name);
  }
  if (config.securityProfile === "strict" && isOpenToAnyGitLabComUser(config)) {
    throw new ConfigError(
      groups.name,
      `or ${users.name} is required with SECURITY_PROFILE=strict on gitlab.com, where anyone ` +
        `can make an account; set ${allowAnyUser.name}=true to admit everyone on purpose`,
    );
  }
}

/**
 * Throws a ConfigError naming `variable` unless GITLAB_SCOPES lets the user's token read group
 * memberships.
 */
export function requireMembershipScope(config: Config, variable: string): void {
  const scopes = config.upstream.scopes.split(/[\s,]+/);
  if (MEMBERSHIP_SCOPES.some((scope) => scopes.includes(scope))) return;
  throw new ConfigError(
    variable,
    `needs read_api or api in ${CONFIG_VARIABLES.upstream.scopes.name} to read memberships ` +
      `(it is ${JSON.stringify(config.upstream.scopes)})`,
  );
}

/** Whether the service admits every gitlab.com account, not having been told to on purpose. */
export function isOpenToAnyGitLabComUser(config: Config): boolean {
  const host = config.upstream.url.hostname.toLowerCase();
  const gitlabCom = host === "gitlab.com" || host === "www.gitlab.com";
  return gitlabCom && !isRestricted(accessPolicyOf(config)) && !config.access.allowAnyUser;
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

/** KV_PATH and DATABASE_URL each choose the store; both set is a mistake, not a preference. */
function requireOneStore(config: Config): void {
  if (config.databaseUrl !== undefined && config.kvPath !== undefined) {
    throw new ConfigError(
      "DATABASE_URL",
      "cannot be set together with KV_PATH: unset one (DATABASE_URL: PostgreSQL, KV_PATH: Deno KV)",
    );
  }
}

/**
 * The redirect sign-in sends GitLab a callback URL, which must not follow the request's `Host`:
 * a request naming another host would have GitLab send its code there.
 */
function requireBaseUrlForRedirect(config: Config): void {
  if (config.upstream.signIn === "redirect" && !config.baseUrl) {
    throw new ConfigError(
      "BASE_URL",
      "is required with GITLAB_SIGN_IN=redirect (GitLab's callback URL is built from it)",
    );
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

/**
 * Why the sign-in runs as it does, for the start-up line: set explicitly, implied by the strict
 * profile (the device flow is phishable, RFC 8628 §5.4), or the spec's default.
 */
export function signInReason(env: Env): string {
  if (env.GITLAB_SIGN_IN?.trim()) return "GITLAB_SIGN_IN is set";
  const profile = env.SECURITY_PROFILE?.trim().toLowerCase();
  return profile === "strict"
    ? "SECURITY_PROFILE=strict: the device flow is phishable (RFC 8628 §5.4)"
    : "the spec's default";
}

/** What a profile cannot run without. */
function requireProfileSettings(config: Config): void {
  if (config.securityProfile === "strict" && !config.baseUrl) {
    throw new ConfigError("BASE_URL", "is required with SECURITY_PROFILE=strict");
  }
}

/** Where the service listens: `HOST`, else an address-like `HOSTNAME`, else every interface. */
export function listenHostname(config: Config): string {
  return config.host ?? config.hostname ?? "0.0.0.0";
}

/** The OAuth settings when both are configured, otherwise undefined. */
export function oauthSettings(config: Config): OAuthSettings | undefined {
  const { upstream: { clientId }, jwtSecret } = config;
  return clientId && jwtSecret ? { gitlabClientId: clientId, jwtSecret } : undefined;
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
    ...(config.upstream.clientId ? [] : [CONFIG_VARIABLES.upstream.clientId.name]),
    ...(config.jwtSecret ? [] : [CONFIG_VARIABLES.jwtSecret.name]),
  ];
}
