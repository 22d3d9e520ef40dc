/**
 * The library's face of the gateway's check (`mod.ts` exports it): `createResourceGuard` protects
 * an MCP server in the same process as the service, or next to it on the same KV, with exactly
 * the check the gateway runs (guard.ts).
 */

import type { Clock } from "../clock.ts";
import { UPSTREAM_VARIABLES } from "../upstream/config.ts";
import { parseHttpUrl, parseSecret, urlWithoutTrailingSlash } from "../config/parsers.ts";
import { systemClock } from "../clock.ts";
import { OAuthError, storeUnavailableError } from "../http/errors.ts";
import { errorResponse } from "../http/responses.ts";
import { createTokenSigner } from "../jwt.ts";
import { sameResource } from "../http/resource.ts";
import { type Logger, silentLogger } from "../logger.ts";
import { MCP_TOOLS_SCOPE } from "../scopes.ts";
import { createSecretBox, sealingSecrets } from "../secret_box.ts";
import { createStore, type StoreDatabase, StoreUnavailableError } from "../store/mod.ts";
import { createGitLabUpstream } from "../upstream/gitlab.ts";
import type { Upstream } from "../upstream/types.ts";
import {
  authenticate,
  type AuthenticatedRequest,
  CLOCK_TOLERANCE_SECONDS,
  type GuardDeps,
} from "../gateway/guard.ts";
import { option } from "./options.ts";
import { createVerifiedTokens } from "../gateway/verified_tokens.ts";
import {
  createRemoteResourceGuard,
  type IntrospectionResourceGuardOptions,
  type JwksResourceGuardOptions,
  type RemoteResourceGuard,
} from "./remote_library.ts";

export { CLOCK_TOLERANCE_SECONDS, MCP_TOOLS_SCOPE };
export type { AuthenticatedRequest, AuthenticatedUser } from "../gateway/guard.ts";
export type {
  GuardIntrospectionOptions,
  IntrospectionResourceGuardOptions,
  JwksResourceGuardOptions,
  RemoteGuardCommonOptions,
  RemoteResourceGuard,
  VerifiedAccess,
} from "./remote_library.ts";

const DEFAULT_GITLAB_TIMEOUT_MS = 10_000;
/** ACCESS_TOKEN_TTL's default. */
const DEFAULT_ACCESS_TOKEN_TTL_SECONDS = 3600;

/** Authenticates requests to one protected resource. */
export interface ResourceGuard {
  /** The request's user and GitLab token, or the ready 401/403 (or 503) to answer. */
  authenticate(request: Request): Promise<AuthenticatedRequest | Response>;
}

/** GitLab settings for refreshing tokens, as the service is configured. */
export interface GuardGitLabOptions {
  /** GITLAB_URL; defaults to `https://gitlab.com`. */
  url?: string | URL;
  /** GITLAB_CLIENT_ID. */
  clientId: string;
  /** Time limit of a refresh request; defaults to 10000 ms. */
  timeoutMs?: number;
}

/** Options of `createResourceGuard`: the service's KV, secrets and URLs. */
export interface ResourceGuardOptions {
  /**
   * The service's KV (or its PostgreSQL backend): the same sessions, and the same refresh lock
   * across processes.
   */
  kv: StoreDatabase;
  /** JWT_SECRET. */
  jwtSecret: string;
  /** JWT_SECRET_PREVIOUS: tokens signed with it stay valid while they live. */
  jwtSecretPrevious?: string;
  /** ENCRYPTION_KEY, when the service has one (GitLab tokens at rest are sealed with it). */
  encryptionKey?: string;
  /** ENCRYPTION_KEY_PREVIOUS, during a rotation of the service's: what it sealed still opens. */
  encryptionKeyPrevious?: string;
  /** The service's base URL, which is the tokens' issuer, e.g. `https://auth.example.com`. */
  issuer: string;
  /** This resource as its protected resource metadata names it; default `{issuer}/mcp`. */
  resource?: string;
  /** GitLab settings; or `upstream` instead. */
  gitlab?: GuardGitLabOptions;
  /** Replaces the GitLab client built from `gitlab`. */
  upstream?: Upstream;
  /** Defaults to the wall clock. */
  clock?: Clock;
  /** Defaults to a logger that drops everything. */
  logger?: Logger;
  /** The scope every request needs; default `mcp:tools`. */
  requiredScope?: string;
  /** Leeway on expiry in seconds; default 30. */
  clockToleranceSeconds?: number;
  /**
   * The service's ACCESS_TOKEN_TTL in seconds; default 3600 (the service's default). A token
   * whose `exp` lies further ahead than this plus a minute is refused; set it when the service
   * runs with a longer lifetime.
   */
  accessTokenTtlSeconds?: number;
  /**
   * The service's DATABASE_TIMEOUT_MS: the most time one request may wait for the store, in
   * all, before it is answered 503 with `Retry-After`; default 5000.
   */
  databaseTimeoutMs?: number;
}

/**
 * A guard over the service's KV and JWT_SECRET, for an MCP server in the same process or next
 * to it (and the gateway itself); throws TypeError on unusable options.
 */
export function createResourceGuard(options: ResourceGuardOptions): ResourceGuard;
/**
 * A guard that verifies ES256/EdDSA tokens with the service's JWKS (`{ jwksUrl }`), without
 * its KV or secret: fast, but a revoked session counts only when its token expires.
 */
export function createResourceGuard(options: JwksResourceGuardOptions): RemoteResourceGuard;
/**
 * A guard that asks the service's `/introspect` (`{ introspection: { url, token } }`): a
 * revoked session is refused within the short cache time.
 */
export function createResourceGuard(
  options: IntrospectionResourceGuardOptions,
): RemoteResourceGuard;
export function createResourceGuard(
  options: ResourceGuardOptions | JwksResourceGuardOptions | IntrospectionResourceGuardOptions,
): ResourceGuard | RemoteResourceGuard {
  const modes = ["jwtSecret", "jwksUrl", "introspection"].filter((mode) =>
    (options as unknown as Record<string, unknown>)[mode] !== undefined
  );
  if (modes.length !== 1) {
    throw new TypeError(
      "createResourceGuard needs exactly one of jwtSecret, jwksUrl, introspection",
    );
  }
  if (!("jwtSecret" in options) || options.jwtSecret === undefined) {
    return createRemoteResourceGuard(
      options as JwksResourceGuardOptions | IntrospectionResourceGuardOptions,
    );
  }
  return createSharedSecretGuard(options);
}

function createSharedSecretGuard(options: ResourceGuardOptions): ResourceGuard {
  const issuer = option(urlWithoutTrailingSlash, "issuer", options.issuer);
  const resource = options.resource === undefined
    ? `${issuer}/mcp`
    : option(urlWithoutTrailingSlash, "resource", options.resource);
  const clock = options.clock ?? systemClock;
  const logger = options.logger ?? silentLogger;
  option(parseSecret, "jwtSecret", options.jwtSecret);
  if (options.jwtSecretPrevious !== undefined) {
    option(parseSecret, "jwtSecretPrevious", options.jwtSecretPrevious);
  }
  if (options.encryptionKey !== undefined) {
    option(parseSecret, "encryptionKey", options.encryptionKey);
  }
  if (options.encryptionKeyPrevious !== undefined) {
    option(parseSecret, "encryptionKeyPrevious", options.encryptionKeyPrevious);
  }
  const jwtSecrets = [options.jwtSecret, ...optionalList(options.jwtSecretPrevious)];
  const deps: GuardDeps = {
    store: createStore(options.kv, clock, createSecretBox(sealingSecrets(options)), {
      timeoutMs: options.databaseTimeoutMs === undefined
        ? undefined
        : positive("databaseTimeoutMs", options.databaseTimeoutMs),
    }),
    clock,
    logger,
    upstream: options.upstream ?? gitLabUpstream(options.gitlab, logger),
    signer: createTokenSigner(jwtSecrets),
    clockToleranceSeconds: options.clockToleranceSeconds ?? CLOCK_TOLERANCE_SECONDS,
    accessTokenTtlSeconds: positive(
      "accessTokenTtlSeconds",
      options.accessTokenTtlSeconds ?? DEFAULT_ACCESS_TOKEN_TTL_SECONDS,
    ),
    requiredScope: options.requiredScope ?? MCP_TOOLS_SCOPE,
    verifiedTokens: createVerifiedTokens(),
    upstreamTimeoutMs: options.gitlab?.timeoutMs ?? DEFAULT_GITLAB_TIMEOUT_MS,
  };
  // As the gateway: a token naming no resource (a build from before resource indicators) was
  // for {issuer}/mcp, and is no other resource's.
  const target = { issuer, resource, refusesUnbound: !sameResource(resource, `${issuer}/mcp`) };
  return {
    async authenticate(request) {
      try {
        // One request's database time is bounded as the service bounds it (5 s by default).
        return await deps.store.withDeadline(() => authenticate(deps, request, target));
      } catch (error) {
        if (error instanceof OAuthError) return errorResponse(error);
        if (error instanceof StoreUnavailableError) {
          // As the service answers: the client tries again, the MCP server sees no exception.
          logger.error("store unavailable", { error: error.message });
          return errorResponse(storeUnavailableError());
        }
        throw error;
      }
    },
  };
}

function gitLabUpstream(gitlab: GuardGitLabOptions | undefined, logger: Logger): Upstream {
  if (!gitlab) throw new TypeError("createResourceGuard needs gitlab settings or an upstream");
  return createGitLabUpstream({
    gitlabUrl: option(
      parseHttpUrl,
      "gitlab.url",
      String(gitlab.url ?? UPSTREAM_VARIABLES.upstream.url.defaultValue),
    ),
    clientId: gitlab.clientId,
    // Scopes matter only when starting a device flow, which a guard never does.
    scopes: "api",
    timeoutMs: gitlab.timeoutMs ?? DEFAULT_GITLAB_TIMEOUT_MS,
    logger,
  });
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new TypeError(`${name} must be positive`);
  return value;
}

function optionalList(value: string | undefined): string[] {
  return value === undefined ? [] : [value];
}
