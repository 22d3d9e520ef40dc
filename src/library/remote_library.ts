/**
 * The options and face of `createResourceGuard`'s two modes that need neither the service's
 * KV nor its secret: `{ jwksUrl }` and `{ introspection }` (remote_guard.ts does the work).
 */

import { parseHttpUrl, urlWithoutTrailingSlash } from "../config/parsers.ts";
import { option } from "./options.ts";
import { type Clock, systemClock } from "../clock.ts";
import { OAuthError } from "../http/errors.ts";
import { errorResponse } from "../http/responses.ts";
import { MCP_TOOLS_SCOPE } from "../scopes.ts";
import { CLOCK_TOLERANCE_SECONDS } from "../gateway/guard.ts";
import {
  authenticateRemotely,
  type ClaimsSource,
  introspectionClaimsSource,
  jwksClaimsSource,
  type RemoteGuardSettings,
  type VerifiedAccess,
} from "./remote_guard.ts";

export type { VerifiedAccess };

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_INTROSPECTION_CACHE_SECONDS = 5;
const MIN_TOKEN_BYTES = 32;

/** Authenticates requests with tokens checked by the JWKS or by introspection. */
export interface RemoteResourceGuard {
  /** Who the request acts for, or the ready 401/403 (or 503) to answer. */
  authenticate(request: Request): Promise<VerifiedAccess | Response>;
}

/** What the two remote modes share. */
export interface RemoteGuardCommonOptions {
  /** The service's base URL, which is the tokens' issuer, e.g. `https://auth.example.com`. */
  issuer: string;
  /** This resource as its protected resource metadata names it; default `{issuer}/mcp`. */
  resource?: string;
  /** The scope every request needs; default `mcp:tools`. */
  requiredScope?: string;
  /** Leeway on expiry in seconds; default 30. */
  clockToleranceSeconds?: number;
  /** Time limit of each request to the service; default 10000 ms. */
  timeoutMs?: number;
  /** Defaults to the wall clock. */
  clock?: Clock;
  /** Replaces the global `fetch` for requests to the service. */
  fetch?: typeof fetch;
}

/**
 * Verify ES256/EdDSA access tokens (ACCESS_TOKEN_ALG) with the service's public keys: no
 * request to the service per token. The key set is fetched on first use and kept five minutes;
 * a token naming a key it lacks makes it fetch again, at most every 30 seconds. A revoked
 * session is noticed only when its token expires: use `introspection` where that matters.
 */
export interface JwksResourceGuardOptions extends RemoteGuardCommonOptions {
  /** The service's `/.well-known/jwks.json` (its metadata's `jwks_uri`). */
  jwksUrl: string;
}

/** Where and how to introspect. */
export interface GuardIntrospectionOptions {
  /** The service's `/introspect` (its metadata's `introspection_endpoint`). */
  url: string;
  /** One of the service's INTROSPECTION_TOKENS (at least 32 bytes). */
  token: string;
  /** How long an active answer is reused (never past the token's expiry); default 5. */
  cacheSeconds?: number;
}

/**
 * Ask the service's `/introspect` about each token (any ACCESS_TOKEN_ALG): a revoked session is
 * refused within `cacheSeconds`.
 */
export interface IntrospectionResourceGuardOptions extends RemoteGuardCommonOptions {
  /** The introspection endpoint and this resource server's credential for it. */
  introspection: GuardIntrospectionOptions;
}

/** A guard in JWKS or introspection mode; throws TypeError on unusable options. */
export function createRemoteResourceGuard(
  options: JwksResourceGuardOptions | IntrospectionResourceGuardOptions,
): RemoteResourceGuard {
  const issuer = option(urlWithoutTrailingSlash, "issuer", options.issuer);
  const settings: RemoteGuardSettings = {
    issuer,
    resource: options.resource === undefined
      ? `${issuer}/mcp`
      : option(urlWithoutTrailingSlash, "resource", options.resource),
    clock: options.clock ?? systemClock,
    fetch: options.fetch ?? ((input, init) => fetch(input, init)),
    requiredScope: options.requiredScope ?? MCP_TOOLS_SCOPE,
    clockToleranceSeconds: options.clockToleranceSeconds ?? CLOCK_TOLERANCE_SECONDS,
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  };
  const claimsOf = "jwksUrl" in options
    ? jwksClaimsSource(settings, option(parseHttpUrl, "jwksUrl", options.jwksUrl).href)
    : introspectionSource(settings, options.introspection);
  return {
    async authenticate(request) {
      try {
        return await authenticateRemotely(settings, claimsOf, request);
      } catch (error) {
        if (error instanceof OAuthError) return errorResponse(error);
        throw error;
      }
    },
  };
}

function introspectionSource(
  settings: RemoteGuardSettings,
  introspection: GuardIntrospectionOptions,
): ClaimsSource {
  if (new TextEncoder().encode(introspection?.token ?? "").length < MIN_TOKEN_BYTES) {
    throw new TypeError(`introspection.token must be at least ${MIN_TOKEN_BYTES} bytes long`);
  }
  const cacheSeconds = introspection.cacheSeconds ?? DEFAULT_INTROSPECTION_CACHE_SECONDS;
  if (!(cacheSeconds >= 0 && cacheSeconds <= 300)) {
    throw new TypeError("introspection.cacheSeconds must be between 0 and 300");
  }
  return introspectionClaimsSource(settings, {
    url: option(parseHttpUrl, "introspection.url", introspection.url).href,
    token: introspection.token,
    cacheMs: cacheSeconds * 1000,
  });
}
