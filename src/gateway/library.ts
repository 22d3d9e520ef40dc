/**
 * The library's face of the gateway's check (`mod.ts` exports it): `createResourceGuard` protects
 * an MCP server in the same process as the service, or next to it on the same KV, with exactly
 * the check the gateway runs (guard.ts).
 */

import type { Clock } from "../clock.ts";
import { systemClock } from "../clock.ts";
import { OAuthError } from "../http/errors.ts";
import { errorResponse } from "../http/responses.ts";
import { createTokenSigner } from "../jwt.ts";
import { type Logger, silentLogger } from "../logger.ts";
import { MCP_TOOLS_SCOPE } from "../scopes.ts";
import { createSecretBox, sealingSecrets } from "../secret_box.ts";
import { createStore } from "../store/mod.ts";
import { createGitLabUpstream } from "../upstream/gitlab.ts";
import type { Upstream } from "../upstream/types.ts";
import {
  authenticate,
  type AuthenticatedRequest,
  CLOCK_TOLERANCE_SECONDS,
  type GuardDeps,
} from "./guard.ts";
import { createVerifiedTokens } from "./verified_tokens.ts";

export { CLOCK_TOLERANCE_SECONDS, MCP_TOOLS_SCOPE };
export type { AuthenticatedRequest, AuthenticatedUser } from "./guard.ts";

const MIN_SECRET_BYTES = 32;
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
  /** The service's KV: the same sessions, and the same refresh lock across processes. */
  kv: Deno.Kv;
  /** JWT_SECRET. */
  jwtSecret: string;
  /** JWT_SECRET_PREVIOUS: tokens signed with it stay valid while they live. */
  jwtSecretPrevious?: string;
  /** ENCRYPTION_KEY, when the service has one (GitLab tokens at rest are sealed with it). */
  encryptionKey?: string;
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
}

/**
 * A guard over the service's KV, for an MCP server in the same process or next to it; throws
 * TypeError on unusable options.
 */
export function createResourceGuard(options: ResourceGuardOptions): ResourceGuard {
  const issuer = requireHttpUrl("issuer", options.issuer);
  const resource = options.resource === undefined
    ? `${issuer}/mcp`
    : requireHttpUrl("resource", options.resource);
  const clock = options.clock ?? systemClock;
  const logger = options.logger ?? silentLogger;
  const jwtSecrets = [options.jwtSecret, ...optionalList(options.jwtSecretPrevious)];
  for (const secret of [...jwtSecrets, ...optionalList(options.encryptionKey)]) {
    requireSecret(secret);
  }
  const deps: GuardDeps = {
    store: createStore(options.kv, clock, createSecretBox(sealingSecrets(options))),
    clock,
    logger,
    upstream: options.upstream ?? gitLabUpstream(options.gitlab, logger),
    signer: createTokenSigner(jwtSecrets),
    clockToleranceSeconds: options.clockToleranceSeconds ?? CLOCK_TOLERANCE_SECONDS,
    accessTokenTtlSeconds: positiveSeconds(
      "accessTokenTtlSeconds",
      options.accessTokenTtlSeconds ?? DEFAULT_ACCESS_TOKEN_TTL_SECONDS,
    ),
    requiredScope: options.requiredScope ?? MCP_TOOLS_SCOPE,
    verifiedTokens: createVerifiedTokens(),
  };
  const target = { issuer, resource };
  return {
    async authenticate(request) {
      try {
        return await authenticate(deps, request, target);
      } catch (error) {
        if (error instanceof OAuthError) return errorResponse(error);
        throw error;
      }
    },
  };
}

function gitLabUpstream(gitlab: GuardGitLabOptions | undefined, logger: Logger): Upstream {
  if (!gitlab) throw new TypeError("createResourceGuard needs gitlab settings or an upstream");
  return createGitLabUpstream({
    gitlabUrl: new URL(gitlab.url ?? "https://gitlab.com"),
    clientId: gitlab.clientId,
    // Scopes matter only when starting a device flow, which a guard never does.
    scopes: "api",
    timeoutMs: gitlab.timeoutMs ?? DEFAULT_GITLAB_TIMEOUT_MS,
    logger,
  });
}

function positiveSeconds(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new TypeError(`${name} must be positive`);
  return value;
}

function requireSecret(secret: string): void {
  if (new TextEncoder().encode(secret).length < MIN_SECRET_BYTES) {
    throw new TypeError(`secrets must be at least ${MIN_SECRET_BYTES} bytes long`);
  }
}

function requireHttpUrl(name: string, raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TypeError(`${name} must be a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`${name} must be an http or https URL`);
  }
  return raw.replace(/\/+$/, "");
}

function optionalList(value: string | undefined): string[] {
  return value === undefined ? [] : [value];
}
