/**
 * `createResourceGuard` without the service's KV or secret (library.ts dispatches here): a
 * resource server that verifies ES256/EdDSA access tokens with the published JWKS, or asks
 * `/introspect` about each one (with a short cache of positive answers). Either way it learns
 * who the user is and what they may do, not their GitLab token, which stays with the service.
 *
 * @see RFC 7517, RFC 7662, RFC 6750 §3
 */

import { errors, importJWK, type JWTHeaderParameters, jwtVerify } from "jose";
import type { Clock } from "../clock.ts";
import { sha256Base64Url } from "../crypto.ts";
import { OAuthError } from "../http/errors.ts";
import { BearerChallengeError } from "../gateway/challenges.ts";
import { bearerToken, isBearerTokenSyntax, MAX_ACCESS_TOKEN_LENGTH } from "../http/bearer_token.ts";
import { machineKindOf } from "../jwt.ts";
import { createRemoteKeySet, KeySetUnavailable, type RemoteKeySet } from "./remote_keys.ts";
import { sameResource } from "../http/resource.ts";

/** What a token verified without the service's KV tells about the request. */
export interface VerifiedAccess {
  /** Who signed in. */
  user: { id: string; username: string };
  /** The access token's scopes. */
  scopes: string[];
  /** The OAuth client the user signed in with. */
  clientId: string;
  /** The session the access token belongs to (its `sid` claim). */
  sessionId: string;
}

/** The claims a remote check reads. */
interface AccessClaims {
  sub: string;
  sid: string;
  scope: string;
  gitlab_user: string;
  client_id?: string;
  aud?: unknown;
  resource?: unknown;
  iss?: unknown;
  exp?: unknown;
}

/** What both remote modes share. */
export interface RemoteGuardSettings {
  issuer: string;
  resource: string;
  clock: Clock;
  fetch: typeof fetch;
  requiredScope: string;
  clockToleranceSeconds: number;
  timeoutMs: number;
}

/** Verifies one token into claims, or throws a BearerChallengeError / 503 OAuthError. */
export type ClaimsSource = (token: string) => Promise<AccessClaims>;

const ASYMMETRIC = ["ES256", "EdDSA"];
/** The JWKS's own max-age. */
const KEY_SET_MAX_AGE_MS = 300_000;
/** At most one fetch a kid the set lacks causes, per this long. */
export const KEY_SET_REFETCH_INTERVAL_MS = 30_000;
/** While no key set could be had at all, at most one fetch per this long (the 503's Retry-After). */
export const KEY_SET_RETRY_MS = 5_000;
/** Entries the introspection cache holds before it forgets the oldest. */
const INTROSPECTION_CACHE_ENTRIES = 10_000;

/** Authenticates a request with `claimsOf`; the refusals carry Bearer challenges. */
export async function authenticateRemotely(
  settings: RemoteGuardSettings,
  claimsOf: ClaimsSource,
  request: Request,
): Promise<VerifiedAccess> {
  const { resource } = settings;
  const value = bearerToken(request.headers.get("authorization"));
  if (value === undefined) throw BearerChallengeError.authenticationRequired(resource);
  // Longer than any token of ours: /introspect would refuse the form (413), not the token.
  if (value.length > MAX_ACCESS_TOKEN_LENGTH || !isBearerTokenSyntax(value)) {
    throw BearerChallengeError.invalidToken(resource, "The access token is malformed");
  }
  const claims = await claimsOf(value);
  // Its rule (servers, tools) and its client's deletion are enforced only at the gateway.
  if (machineKindOf(claims.sub) !== undefined) {
    throw BearerChallengeError.invalidToken(resource, "This resource admits no machine callers");
  }
  // RFC 9068 §4: the token must name this resource. Every token the service has signed names
  // one (0.1.0 on); a token naming none is another resource's for all this guard can tell.
  const bound = claims.resource;
  if (typeof bound !== "string" || !sameResource(bound, resource)) {
    throw BearerChallengeError.invalidToken(
      resource,
      "The access token was issued for another resource",
    );
  }
  const scopes = claims.scope.split(" ").filter((scope) => scope !== "");
  if (!scopes.includes(settings.requiredScope)) {
    throw BearerChallengeError.insufficientScope(resource, settings.requiredScope);
  }
  return {
    user: { id: claims.sub, username: claims.gitlab_user },
    scopes,
    clientId: claims.client_id ?? String(claims.aud),
    sessionId: claims.sid,
  };
}

/** Claims of tokens verified with the JWKS at `jwksUrl` (ES256 or EdDSA, as each key says). */
export function jwksClaimsSource(settings: RemoteGuardSettings, jwksUrl: string): ClaimsSource {
  const keySet = createRemoteKeySet({
    url: jwksUrl,
    clock: settings.clock,
    fetch: settings.fetch,
    maxAgeMs: KEY_SET_MAX_AGE_MS,
    refetchIntervalMs: KEY_SET_REFETCH_INTERVAL_MS,
    retryMs: KEY_SET_RETRY_MS,
    timeoutMs: settings.timeoutMs,
  });
  const keyFor = (header: JWTHeaderParameters) => publicKeyFor(keySet, header);
  return async (token) => {
    try {
      const { payload } = await jwtVerify(token, keyFor, {
        algorithms: ASYMMETRIC,
        issuer: settings.issuer,
        currentDate: new Date(settings.clock.now()),
        clockTolerance: settings.clockToleranceSeconds,
        requiredClaims: ["exp"],
      });
      return requireClaims(payload, settings.resource);
    } catch (error) {
      if (error instanceof KeySetUnavailable) throw unavailable("the key set");
      if (error instanceof BearerChallengeError) throw error;
      throw BearerChallengeError.invalidToken(settings.resource, describe(error));
    }
  };
}

/** The key the header names, of the algorithm the header claims and the key was published for. */
async function publicKeyFor(keySet: RemoteKeySet, header: JWTHeaderParameters): Promise<CryptoKey> {
  const jwk = header.kid === undefined ? undefined : await keySet.find(header.kid);
  if (!jwk) throw new errors.JWKSNoMatchingKey();
  if (jwk.alg !== undefined && jwk.alg !== header.alg) throw new errors.JOSEAlgNotAllowed();
  try {
    return await importJWK(jwk, header.alg) as CryptoKey;
  } catch {
    // A published key WebCrypto will not import (a DOMException, not jose's) is no key of ours.
    throw new errors.JWKSNoMatchingKey();
  }
}

/** Introspection's settings. */
export interface IntrospectionSettings {
  url: string;
  token: string;
  cacheMs: number;
}

/**
 * Claims from `/introspect`: an active answer is kept for `cacheMs` (never past the token's
 * `exp`), so a burst of calls asks once and a revocation counts within that time.
 */
export function introspectionClaimsSource(
  settings: RemoteGuardSettings,
  introspection: IntrospectionSettings,
): ClaimsSource {
  const cache = new Map<string, { claims: AccessClaims; untilMs: number }>();
  return async (token) => {
    const key = sha256Base64Url(token);
    const now = settings.clock.now();
    const cached = cache.get(key);
    if (cached && cached.untilMs > now) return cached.claims;
    cache.delete(key);
    const answer = await askIntrospection(settings, introspection, token);
    if (answer.active !== true) {
      throw BearerChallengeError.invalidToken(settings.resource, "The access token is not active");
    }
    if (answer.iss !== settings.issuer) {
      throw BearerChallengeError.invalidToken(
        settings.resource,
        "The access token was issued by another server",
      );
    }
    const claims = requireClaims(answer, settings.resource);
    const exp = typeof answer.exp === "number" ? answer.exp * 1000 : now;
    if (cache.size >= INTROSPECTION_CACHE_ENTRIES) cache.delete(cache.keys().next().value ?? "");
    cache.set(key, { claims, untilMs: Math.min(now + introspection.cacheMs, exp) });
    return claims;
  };
}

async function askIntrospection(
  settings: RemoteGuardSettings,
  introspection: IntrospectionSettings,
  token: string,
): Promise<Record<string, unknown>> {
  let response: Response;
  try {
    response = await settings.fetch(introspection.url, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${introspection.token}`,
        "Content-Type": "application/x-www-form-urlencoded",
        Accept: "application/json",
      },
      body: new URLSearchParams({ token, token_type_hint: "access_token" }),
      // A redirect would hand the token and the answer to another host.
      redirect: "manual",
      signal: AbortSignal.timeout(settings.timeoutMs),
    });
  } catch {
    throw unavailable("introspection");
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw unavailable("introspection");
  }
  const body: unknown = await response.json().catch(() => undefined);
  if (typeof body !== "object" || body === null) throw unavailable("introspection");
  return body as Record<string, unknown>;
}

function requireClaims(payload: Record<string, unknown>, resource: string): AccessClaims {
  const { sub, sid, scope, gitlab_user } = payload;
  const strings = [sub, sid, scope, gitlab_user];
  if (!strings.every((value) => typeof value === "string")) {
    throw BearerChallengeError.invalidToken(resource, "The access token lacks required claims");
  }
  return payload as unknown as AccessClaims;
}

/** A description that names the problem without repeating anything from the token. */
function describe(error: unknown): string {
  if (error instanceof errors.JWTExpired) return "The access token expired";
  if (error instanceof errors.JWTClaimValidationFailed) {
    return error.claim === "iss"
      ? "The access token was issued by another server"
      : `The access token's ${error.claim} claim is not valid`;
  }
  if (error instanceof errors.JWKSNoMatchingKey) return "The access token's key is not known";
  if (error instanceof errors.JWSSignatureVerificationFailed) {
    return "The access token's signature is not valid";
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return "The access token's algorithm is not accepted";
  }
  if (error instanceof errors.JOSEError || error instanceof TypeError) {
    return "The access token is malformed";
  }
  throw error;
}

function unavailable(what: string): OAuthError {
  return new OAuthError(
    503,
    "temporarily_unavailable",
    `The authorization service's ${what} could not be reached; try again`,
    { "Retry-After": "5" },
  );
}
