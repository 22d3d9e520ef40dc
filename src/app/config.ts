/**
 * The service's configuration, assembled on the top floor: every wing declares and parses its
 * own variables (`src/<wing>/config.ts`), this module adds the service-wide ones (where it
 * listens, its base URL, proxies, the security profile, rate limits), puts them in one table,
 * and checks what ties several wings together. Nothing else reads the environment.
 *
 * @see docs/configuration.md "Configuration"
 */

import { ACCESS_VARIABLES, accessPolicyOf } from "../access/config.ts";
import { policyGroups } from "../access/call_policy.ts";
import { isRestricted } from "../access/policy.ts";
import { CLIENTS_VARIABLES } from "../clients/config.ts";
import { DEVICE_AUTHORIZATION_VARIABLES } from "../sign_in/device_authorization/config.ts";
import {
  addressOrIgnored,
  caseInsensitive,
  integerBetween,
  oneOf,
  parseCidrs,
  parseRateLimit,
  parseTrustProxy,
  unbracketed,
  urlWithoutTrailingSlash,
} from "../config/parsers.ts";
import {
  ConfigError,
  type ConfigTable,
  type ConfigVariable,
  type Env,
  readTable,
  type ValuesOf,
  variable,
  variablesOf,
} from "../config/variable.ts";
import { secretFileForms, withSecretFiles } from "../config/secret_files.ts";
import { GATEWAY_VARIABLES } from "../gateway/config.ts";
import { requireFreeResourcePath, SERVERS_VARIABLES } from "../servers/config.ts";
import { INTROSPECTION_VARIABLES } from "../introspection/config.ts";
import { KEYS_VARIABLES, requireSigningKeys } from "../keys/config.ts";
import { MACHINE_VARIABLES, requireMachineServers } from "../machine/config.ts";
import { METRICS_VARIABLES } from "../metrics/config.ts";
import type { BucketLabel } from "../metrics/catalog.ts";
import type { RateLimit } from "../http/rate_limit.ts";
import { SESSION_VARIABLES } from "../session/config.ts";
import { SIGN_IN_VARIABLES } from "../sign_in/config.ts";
import { requireOneStore, STORE_VARIABLES } from "../store/config.ts";
import { requireMembershipScope, UPSTREAM_VARIABLES } from "../upstream/config.ts";
import { requireServerScopes } from "./server_scopes_config.ts";
import { PROVIDERS } from "../upstream/providers.ts";
import type { ProviderDescription } from "../upstream/oauth_provider.ts";
import {
  requireListedRoles,
  requirePolicyFileRoles,
  requireServersFileRoles,
  rolesOf,
} from "./roles_config.ts";

export { ConfigError, type ConfigVariable, type Env } from "../config/variable.ts";

/** Where the service listens and how it sees its requests; its profile; its rate limits. */
const SERVICE_VARIABLES = {
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
    introspect: variable(
      "RATE_LIMIT_INTROSPECT",
      "1200/60",
      parseRateLimit,
      "per introspection caller (its token), for `/introspect`",
    ),
    device: variable(
      "RATE_LIMIT_DEVICE",
      "20/600",
      parseRateLimit,
      "wrong user codes at `/device` per client IP, five times that per /24 or /56 " +
        "([device sign-in](mcp-clients.md#headless-clients-device-authorization))",
    ),
    mcp: variable(
      "RATE_LIMIT_MCP",
      "600/60",
      parseRateLimit,
      "gateway: MCP messages / seconds per sign-in session (per client for a machine client), " +
        "loopback too ([why](security.md#abuse-limits))",
    ),
  } satisfies Readonly<Record<BucketLabel, ConfigVariable<RateLimit | undefined>>>,
  /** `exempt`: loopback clients are never limited; `limit`: they are, like everyone. */
  rateLimitLoopback: variable(
    "RATE_LIMIT_LOOPBACK",
    "exempt",
    oneOf("exempt", "limit"),
    "`limit`: loopback clients are limited too",
  ),
  /** Canonical CIDRs whose clients no per-address limit counts (an office's egress address). */
  rateLimitExempt: variable(
    "RATE_LIMIT_EXEMPT",
    "none",
    parseCidrs,
    "client CIDRs no per-address limit counts, e.g. an office's egress ([sizing](#abuse-limits))",
  ),
} satisfies ConfigTable;

/**
 * Every environment variable the service reads, keyed by its Config field. Adding a variable is
 * one entry in its wing's table and one row in docs/configuration.md's table (a test compares
 * the two). The signing secret comes first: when several values are wrong, JWT_SECRET's error is
 * reported.
 */
export const CONFIG_VARIABLES = {
  ...KEYS_VARIABLES,
  ...UPSTREAM_VARIABLES,
  ...ACCESS_VARIABLES,
  ...SERVICE_VARIABLES,
  ...SESSION_VARIABLES,
  ...STORE_VARIABLES,
  ...CLIENTS_VARIABLES,
  ...SERVERS_VARIABLES,
  ...GATEWAY_VARIABLES,
  ...MACHINE_VARIABLES,
  ...SIGN_IN_VARIABLES,
  ...DEVICE_AUTHORIZATION_VARIABLES,
  ...INTROSPECTION_VARIABLES,
  ...METRICS_VARIABLES,
} satisfies ConfigTable;

/** Everything the service is configured with: one field per entry of CONFIG_VARIABLES. */
export type Config = ValuesOf<typeof CONFIG_VARIABLES>;

/** The limit of each rate-limited endpoint family. */
export type RateLimits = Config["rateLimits"];

/** The security profiles: `spec` (the default) and `strict`. */
export type SecurityProfile = "spec" | "strict";

/**
 * The defaults each profile gives the variables it governs (explicit values win). `strict`
 * closes what the spec leaves open: the phishable device flow, unregistered redirect URIs and
 * replayed codes and refresh tokens.
 *
 * @see docs/security.md "Security profile", RFC 9700 §2.1 and §4.14.2, RFC 8628 §5.4
 */
export const PROFILE_DEFAULTS: Readonly<Record<SecurityProfile, Readonly<Env>>> = {
  spec: {},
  strict: {
    // The device flow is phishable by design (RFC 8628 §5.4): anyone can start one and send the
    // user code to a victim, whose approval then signs the attacker in.
    GITLAB_SIGN_IN: "redirect",
    // The same trade-off on our own device endpoint: on only when the operator says so.
    DEVICE_AUTHORIZATION: "off",
    REDIRECT_URI_POLICY: "registered",
    REVOKE_ON_CODE_REPLAY: "true",
    REVOKE_ON_REFRESH_REPLAY: "true",
    // A GitLab error during a re-check is no answer, and the user can provoke one.
    ACCESS_RECHECK_GRACE_SECONDS: "0",
  },
};

/** The parts of Config that make OAuth work; both must be present. */
export interface OAuthSettings {
  /** `upstream.clientId` (GITLAB_CLIENT_ID), known to be set. */
  gitlabClientId: string;
  jwtSecret: string;
}

/**
 * Reads and validates the configuration from an environment map. SECURITY_PROFILE supplies the
 * defaults of the variables it governs; a variable set explicitly wins. Throws ConfigError.
 */
export function loadConfig(given: Env): Config {
  const env = withSecretFiles(given, variablesOf(CONFIG_VARIABLES));
  const profile = CONFIG_VARIABLES.securityProfile.read(env);
  const config = readTable(CONFIG_VARIABLES, withProfileDefaults(profile, env));
  for (const check of CROSS_CHECKS) check(config);
  return config;
}

/** The rules between variables, in the order start-up applies them; each throws ConfigError. */
export const CROSS_CHECKS: readonly ((config: Config) => void)[] = [
  // The roles the lists and files name are the provider's (a provider that src/upstream/ does
  // not know is refused, and checked, where it is chosen: app/deps.ts).
  ...[requireListedRoles, requirePolicyFileRoles, requireServersFileRoles].map(
    (check) => (config: Config) => {
      const provider = knownProvider(config);
      if (provider) check(config, rolesOf(provider));
    },
  ),
  requireBaseUrlBehindProxy,
  requireProfileSettings,
  requireOneStore,
  requireSigningKeys,
  requireBaseUrlForRedirect,
  requireAccessSettings,
  requireMachineServers,
  requireFreeResourcePath,
];

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
  if (config.mcpServersFile) requireServerScopes(config, config.mcpServersFile);
  if (config.securityProfile === "strict" && isOpenToAnyGitLabComUser(config)) {
    throw new ConfigError(
      groups.name,
      `or ${users.name} is required with SECURITY_PROFILE=strict on gitlab.com, where anyone ` +
        `can make an account; set ${allowAnyUser.name}=true to admit everyone on purpose`,
    );
  }
}

/** Whether the service admits every gitlab.com account, not having been told to on purpose. */
export function isOpenToAnyGitLabComUser(config: Config): boolean {
  return anyoneCanSignUpAt(config) && !isRestricted(accessPolicyOf(config)) &&
    !config.access.allowAnyUser;
}

/**
 * Whether SECURITY_PROFILE=strict runs on a self-managed instance with no list, not told to
 * admit everyone on purpose: open sign-up, external and guest accounts make that as exposed as
 * gitlab.com, which strict refuses; here start-up only warns (the instance may be closed).
 */
export function isStrictOpenToAnySelfManagedUser(config: Config): boolean {
  return config.securityProfile === "strict" && !isRestricted(accessPolicyOf(config)) &&
    !config.access.allowAnyUser && !anyoneCanSignUpAt(config);
}

/** Whether the configured provider says anyone can make an account at its URL (gitlab.com). */
function anyoneCanSignUpAt(config: Config): boolean {
  return knownProvider(config)?.anyoneCanSignUp?.(config.upstream.url) ?? false;
}

/** The provider UPSTREAM_PROVIDER names, if `src/upstream/providers.ts` has it. */
function knownProvider(config: Config): ProviderDescription | undefined {
  const name = config.upstream.provider;
  return Object.hasOwn(PROVIDERS, name) ? PROVIDERS[name] : undefined;
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
  const variables = variablesOf(CONFIG_VARIABLES);
  return [...variables, ...secretFileForms(variables)];
}

/** The environment with the profile's defaults filled in where a variable is unset or blank. */
export function withProfileDefaults(profile: SecurityProfile, env: Env): Env {
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

/** The one warning main.ts logs when OAuth is not configured, naming what is missing. */
export function missingOAuthSettings(config: Config): string[] {
  return [
    ...(config.upstream.clientId ? [] : [CONFIG_VARIABLES.upstream.clientId.name]),
    ...(config.jwtSecret ? [] : [CONFIG_VARIABLES.jwtSecret.name]),
  ];
}
