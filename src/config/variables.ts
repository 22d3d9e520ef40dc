/**
 * Every environment variable the service reads, keyed by its Config field, and what each
 * security profile defaults.
 *
 * @see README.md "Configuration"
 */

import {
  addressOrIgnored,
  caseInsensitive,
  integerBetween,
  MIN_SECRET_BYTES,
  oneOf,
  parseBoolean,
  parseDatabaseUrl,
  parseHttpUrl,
  parseRedirectPatterns,
  parseSecret,
  parseTrustProxy,
  providerName,
  text,
  unbracketed,
  urlWithoutTrailingSlash,
} from "./parsers.ts";
import { type ConfigTable, type Env, variable } from "./variable.ts";
import { parseSigningKeys, parseSigningKeysFile } from "../keys/signing_keys.ts";
import { parseIntrospectionTokens } from "../introspection/callers.ts";
import { parseAllowedGroups, parseAllowedUsers } from "../access/policy.ts";
import { ABUSE_VARIABLES, GATEWAY_VARIABLES } from "./more_variables.ts";

/**
 * Every environment variable the service reads, keyed by its Config field. Adding a variable is
 * one entry here and one row in README.md's configuration table (a test compares the two).
 */
export const CONFIG_VARIABLES = {
  // The OAuth settings first: when several values are wrong, JWT_SECRET's error is reported.
  /** Absent: the service starts but every operation answers 500 (spec §1.7). */
  jwtSecret: variable(
    "JWT_SECRET",
    undefined,
    parseSecret,
    `HS256 signing secret, at least ${MIN_SECRET_BYTES} bytes`,
  ),
  /** The upstream identity provider and our application there. */
  upstream: {
    /** Absent: as jwtSecret. */
    clientId: variable("GITLAB_CLIENT_ID", undefined, text, "GitLab OAuth application id"),
    url: variable(
      "GITLAB_URL",
      "https://gitlab.com",
      parseHttpUrl,
      "GitLab instance (self-hosted too, with or without a sub-path)",
    ),
    scopes: variable("GITLAB_SCOPES", "api", text, "scopes asked of GitLab"),
    /** Which provider of `src/upstream/providers.ts` signs users in. */
    provider: variable(
      "UPSTREAM_PROVIDER",
      "gitlab",
      providerName,
      "the identity provider (`gitlab`; [adding one](#adding-another-identity-provider-eg-github))",
    ),
    /** `device`: the spec's device flow; `redirect`: consent page and the provider's sign-in. */
    signIn: variable(
      "GITLAB_SIGN_IN",
      "device",
      caseInsensitive(oneOf("device", "redirect")),
      "`redirect`: GitLab's redirect sign-in with our consent page ([why](#redirect-sign-in))",
    ),
    /** A confidential application's secret (redirect sign-in only); a secret: never logged. */
    clientSecret: variable(
      "GITLAB_CLIENT_SECRET",
      undefined,
      text,
      "redirect sign-in: the secret of a confidential GitLab application",
    ),
  },
  /** Who may sign in; both lists unset: every account the upstream signs in (the spec). */
  access: {
    groups: variable(
      "ALLOWED_GITLAB_GROUPS",
      undefined,
      parseAllowedGroups,
      "group full paths whose members may sign in, each with an optional `:role`",
      "anyone",
    ),
    users: variable(
      "ALLOWED_GITLAB_USERS",
      undefined,
      parseAllowedUsers,
      "usernames who may sign in too, comma-separated",
      "anyone",
    ),
    /** How often a refresh asks GitLab again whether the session's user is still admitted. */
    recheckSeconds: variable(
      "ACCESS_RECHECK_SECONDS",
      "900",
      integerBetween(1, 86_400),
      "the refresh grant re-checks the lists at most this often per session",
    ),
    /** Under SECURITY_PROFILE=strict on gitlab.com: no list, on purpose. */
    allowAnyUser: variable(
      "ALLOW_ANY_GITLAB_USER",
      "false",
      parseBoolean,
      "`true`: no list on gitlab.com on purpose (strict refuses to start otherwise)",
    ),
  },
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
  /** PostgreSQL instead of Deno KV (src/store/postgres/); a secret when it holds a password. */
  databaseUrl: variable(
    "DATABASE_URL",
    undefined,
    parseDatabaseUrl,
    "PostgreSQL store: `postgres://user:pass@host:5432/db?sslmode=require`; not with `KV_PATH`",
    "unset: Deno KV",
  ),
  databasePoolSize: variable(
    "DATABASE_POOL_SIZE",
    "10",
    integerBetween(1, 1000),
    "connections to PostgreSQL per process",
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
  ...GATEWAY_VARIABLES,
  ...ABUSE_VARIABLES,
  /** Key for GitLab tokens at rest (AES-GCM); undefined: derived from JWT_SECRET with HKDF. */
  encryptionKey: variable(
    "ENCRYPTION_KEY",
    undefined,
    parseSecret,
    `key (≥ ${MIN_SECRET_BYTES} bytes) for GitLab tokens at rest`,
    "derived from `JWT_SECRET`",
  ),
  /** A retired signing secret whose tokens are still accepted while they live. */
  jwtSecretPrevious: variable(
    "JWT_SECRET_PREVIOUS",
    undefined,
    parseSecret,
    "the secret before a rotation: its tokens and stored sessions stay valid",
  ),
  /** `HS256`: the spec; `ES256`/`EdDSA`: signed with SIGNING_KEYS, published at the JWKS. */
  accessTokenAlg: variable(
    "ACCESS_TOKEN_ALG",
    "HS256",
    oneOf("HS256", "ES256", "EdDSA"),
    "`ES256`/`EdDSA`: access tokens resource servers verify with `/.well-known/jwks.json`",
  ),
  /** Private JWKs, first signs, all published; undefined: none (or SIGNING_KEYS_FILE). */
  signingKeys: variable(
    "SIGNING_KEYS",
    undefined,
    parseSigningKeys,
    "ES256/EdDSA: JSON array of private JWKs with `kid`s; the first signs, all verify",
  ),
  /** A file holding what SIGNING_KEYS would; read once at start-up. */
  signingKeysFile: variable(
    "SIGNING_KEYS_FILE",
    undefined,
    parseSigningKeysFile,
    "a file holding `SIGNING_KEYS` (instead of it)",
  ),
  /** Bearer credentials of the resource servers that may call /introspect; undefined: 404. */
  introspectionTokens: variable(
    "INTROSPECTION_TOKENS",
    undefined,
    parseIntrospectionTokens,
    "comma list of secrets (≥ 32 bytes each) that may call `/introspect` (else it is 404)",
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
  /** The bearer token of `GET /metrics`; undefined: no such endpoint (404). */
  metricsToken: variable(
    "METRICS_TOKEN",
    undefined,
    parseSecret,
    `bearer token (≥ ${MIN_SECRET_BYTES} bytes) for \`GET /metrics\` ([metrics](#operations)); unset: 404`,
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
 * closes what the spec leaves open: the phishable device flow, unregistered redirect URIs and
 * replayed codes and refresh tokens.
 *
 * @see README.md "Security profile", RFC 9700 §2.1 and §4.14.2, RFC 8628 §5.4
 */
export const PROFILE_DEFAULTS: Readonly<Record<SecurityProfile, Readonly<Env>>> = {
  spec: {},
  strict: {
    // The device flow is phishable by design (RFC 8628 §5.4): anyone can start one and send the
    // user code to a victim, whose approval then signs the attacker in.
    GITLAB_SIGN_IN: "redirect",
    REDIRECT_URI_POLICY: "registered",
    REVOKE_ON_CODE_REPLAY: "true",
    REVOKE_ON_REFRESH_REPLAY: "true",
  },
};
