/**
 * The resource server's side of our tokens: checks an MCP request's `Authorization: Bearer`
 * access token, the session behind it and its scope, keeps the session's GitLab token fresh,
 * and answers failures the way RFC 6750 §3 and the MCP authorization spec say. The gateway
 * route uses it, and so can a Deno MCP server in the same process (through `mod.ts`).
 *
 * @see RFC 6750 §3, RFC 9728 §5.1, MCP authorization spec ("Access Token Usage")
 */

import { errors } from "jose";
import type { Clock } from "../clock.ts";
import { systemClock } from "../clock.ts";
import { OAuthError } from "../http/errors.ts";
import { errorResponse, NO_STORE } from "../http/responses.ts";
import { type AccessTokenClaims, createTokenSigner, type TokenSigner } from "../jwt.ts";
import { type Logger, silentLogger } from "../logger.ts";
import { protectedResourceMetadataUrl, sameResource } from "./resource.ts";
import { MCP_TOOLS_SCOPE } from "../scopes.ts";
import { createSecretBox, sealingSecrets } from "../secret_box.ts";
import { ensureFreshUpstreamToken, UpstreamRefreshFailed } from "../session/upstream_refresh.ts";
import {
  createVerifiedTokens,
  type VerifiedToken,
  type VerifiedTokens,
} from "./verified_tokens.ts";
import { createStore, type Store, type Versioned } from "../store/mod.ts";
import type { SessionRecord } from "../store/records.ts";
import { createGitLabUpstream } from "../upstream/gitlab.ts";
import { type Upstream, UpstreamError } from "../upstream/types.ts";

export { MCP_TOOLS_SCOPE };

/** Leeway on `exp` for clocks that disagree a little. */
export const CLOCK_TOLERANCE_SECONDS = 30;
/** Suggested wait after a transient GitLab failure left no usable token. */
const RETRY_AFTER_SECONDS = "5";
const MIN_SECRET_BYTES = 32;
const DEFAULT_GITLAB_TIMEOUT_MS = 10_000;

/** The GitLab user a request acts for. */
export interface AuthenticatedUser {
  /** GitLab's numeric user id. */
  id: number;
  /** GitLab's username, as it was at sign-in. */
  username: string;
}

/** What a successful authentication knows about the request. */
export interface AuthenticatedRequest {
  /** Who signed in. */
  user: AuthenticatedUser;
  /** The access token's scopes. */
  scopes: string[];
  /** The OAuth client the user signed in with. */
  clientId: string;
  /** The session the access token belongs to (its `sid` claim). */
  sessionId: string;
  /** The user's GitLab access token, valid for at least five more minutes when GitLab said. */
  gitlabToken: string;
}

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
}

/** Whose tokens are accepted, and which protected resource the challenges point at. */
export interface GuardTarget {
  /** Expected `iss`: the service's base URL. */
  issuer: string;
  /** The protected resource; its metadata URL goes into every challenge. */
  resource: string;
}

/** What the authenticator works with; the service's AppDeps provide all of it. */
export interface GuardDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  upstream: Upstream;
  signer: Pick<TokenSigner, "verify">;
  /** Leeway on `exp` for clocks that disagree a little. */
  clockToleranceSeconds: number;
  requiredScope: string;
  /** Tokens accepted within the last second, so a burst of calls is checked once. */
  verifiedTokens: VerifiedTokens;
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
    requiredScope: options.requiredScope ?? MCP_TOOLS_SCOPE,
    verifiedTokens: createVerifiedTokens(),
  };
  return { authenticate: (request) => authenticateRequest(deps, request, { issuer, resource }) };
}

/**
 * Authenticates one request for a target: the one implementation behind the guard and the
 * gateway. Refusals come back as ready responses, rendered like every other error.
 */
export async function authenticateRequest(
  deps: GuardDeps,
  request: Request,
  target: GuardTarget,
): Promise<AuthenticatedRequest | Response> {
  const token = bearerToken(request.headers.get("authorization"));
  if (token === undefined) return authenticationRequired(target.resource);
  try {
    const found = deps.verifiedTokens.get(token, target.issuer, deps.clock.now()) ??
      await verifyAndRemember(deps, token, target);
    requireResource(found.claims, target.resource);
    requireScope(found.claims, deps.requiredScope);
    return authenticated(found);
  } catch (error) {
    if (!(error instanceof OAuthError)) throw error;
    return errorResponse(withChallenge(error, target.resource, deps.requiredScope));
  }
}

/**
 * The full check of a token: signature and claims, resource, session, scope, a fresh GitLab
 * token. What passed is remembered for the next calls (verified_tokens.ts).
 */
async function verifyAndRemember(
  deps: GuardDeps,
  token: string,
  target: GuardTarget,
): Promise<VerifiedToken> {
  const claims = await verifyToken(deps, token, target.issuer);
  requireResource(claims, target.resource);
  const session = await liveSession(deps, claims);
  requireScope(claims, deps.requiredScope);
  const fresh = await freshSession(deps, session);
  const upstreamTokens = await deps.store.openUpstreamTokens(fresh);
  if (!upstreamTokens) throw sessionEnded();
  const found = {
    claims,
    expiresAtMs: expiryOf(claims),
    session: fresh,
    upstreamToken: upstreamTokens.accessToken,
  };
  deps.verifiedTokens.remember(token, found, deps.clock.now());
  return found;
}

/** `exp` in milliseconds; the signer requires it, so a token without one is never remembered. */
function expiryOf(claims: AccessTokenClaims): number {
  const { exp } = claims as { exp?: unknown };
  return typeof exp === "number" ? exp * 1000 : 0;
}

/**
 * The `WWW-Authenticate` value of a 401 for a token that is not (or no longer) acceptable.
 *
 * @see RFC 6750 §3, RFC 9728 §5.1
 */
export function invalidTokenChallenge(resource: string, description: string): string {
  return challenge({
    error: "invalid_token",
    error_description: description,
    resource_metadata: protectedResourceMetadataUrl(resource),
  });
}

/** The token of `Authorization: Bearer <token>`; undefined when no bearer token was sent. */
function bearerToken(header: string | null): string | undefined {
  const match = header?.match(/^Bearer(?:[ \t]+(.*))?$/i);
  return match ? (match[1] ?? "").trim() : undefined;
}

async function verifyToken(
  deps: GuardDeps,
  token: string,
  issuer: string,
): Promise<AccessTokenClaims> {
  let claims: AccessTokenClaims;
  try {
    claims = await deps.signer.verify(token, issuer, deps.clock.now(), deps.clockToleranceSeconds);
  } catch (error) {
    throw invalidToken(describeJoseError(error));
  }
  const { sid, sub, scope } = claims as Partial<Record<keyof AccessTokenClaims, unknown>>;
  if (typeof sid !== "string" || typeof sub !== "string" || typeof scope !== "string") {
    throw invalidToken("The access token lacks required claims");
  }
  return claims;
}

/**
 * RFC 8707: a token bound to another MCP server is refused here even when that server shares
 * our secret. Tokens from before resource indicators carry no `resource` and are accepted.
 */
function requireResource(claims: AccessTokenClaims, resource: string): void {
  const bound: unknown = claims.resource;
  // The same string is the common case, and needs no URL parsing on every call.
  if (bound === undefined || bound === resource) return;
  if (typeof bound !== "string" || !sameResource(bound, resource)) {
    throw invalidToken("The access token was issued for another resource");
  }
}

/** A description that names the problem without repeating anything from the token. */
function describeJoseError(error: unknown): string {
  if (error instanceof errors.JWTExpired) return "The access token expired";
  if (error instanceof errors.JWTClaimValidationFailed) {
    return error.claim === "iss"
      ? "The access token was issued by another server"
      : `The access token's ${error.claim} claim is not valid`;
  }
  if (error instanceof errors.JWSSignatureVerificationFailed) {
    return "The access token's signature is not valid";
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return "The access token's algorithm is not accepted";
  }
  if (error instanceof errors.JOSEError) return "The access token is malformed";
  throw error;
}

/** The session the token names, if it still exists and belongs to the token's user. */
async function liveSession(
  deps: GuardDeps,
  claims: AccessTokenClaims,
): Promise<Versioned<SessionRecord>> {
  const session = await deps.store.getSession(claims.sid);
  if (!session || String(session.value.upstreamUserId) !== claims.sub) throw sessionEnded();
  return session;
}

function requireScope(claims: AccessTokenClaims, scope: string): void {
  if (!claims.scope.split(" ").includes(scope)) {
    throw new OAuthError(403, "insufficient_scope", `The access token lacks the ${scope} scope`);
  }
}

/**
 * The session with a GitLab token that does not expire within five minutes. When GitLab
 * refuses for good the user must sign in again; when it merely fails, a token that has not
 * expired yet is still used.
 */
async function freshSession(
  deps: GuardDeps,
  session: Versioned<SessionRecord>,
): Promise<SessionRecord> {
  let fresh: Versioned<SessionRecord> | null;
  try {
    fresh = await ensureFreshUpstreamToken(deps, session);
  } catch (error) {
    if (!(error instanceof UpstreamRefreshFailed)) throw error;
    return refreshFailed(deps, session.value, error);
  }
  if (!fresh) throw sessionEnded();
  return fresh.value;
}

function refreshFailed(
  deps: GuardDeps,
  session: SessionRecord,
  error: UpstreamRefreshFailed,
): SessionRecord {
  const terminal = error.cause instanceof UpstreamError && error.cause.failure === "terminal";
  deps.logger.warn("GitLab token refresh failed", {
    sessionId: session.id,
    terminal,
    error: String(error.cause),
  });
  if (terminal) {
    throw invalidToken("GitLab no longer accepts this sign-in; sign in again");
  }
  if (session.upstreamTokenExpiry > deps.clock.now()) return session;
  throw new OAuthError(
    503,
    "temporarily_unavailable",
    "GitLab could not renew the token; try again",
    { "Retry-After": RETRY_AFTER_SECONDS },
  );
}

function authenticated({ claims, session, upstreamToken }: VerifiedToken): AuthenticatedRequest {
  return {
    user: { id: session.upstreamUserId, username: session.upstreamUsername },
    scopes: claims.scope.split(" ").filter((scope) => scope !== ""),
    clientId: session.clientId,
    sessionId: session.id,
    gitlabToken: upstreamToken,
  };
}

/** No bearer token: a challenge without error code (RFC 6750 §3.1). */
function authenticationRequired(resource: string): Response {
  return Response.json(
    { error_description: "Authentication required: send an access token as Bearer" },
    {
      status: 401,
      headers: {
        ...NO_STORE,
        "WWW-Authenticate": challenge({
          resource_metadata: protectedResourceMetadataUrl(resource),
        }),
      },
    },
  );
}

/** A refusal with the challenge RFC 6750 §3 asks for: where to get a token, and why. */
function withChallenge(error: OAuthError, resource: string, scope: string): OAuthError {
  if (error.status === 401) {
    return error.withHeaders({
      "WWW-Authenticate": invalidTokenChallenge(resource, error.description),
    });
  }
  if (error.status === 403) {
    return error.withHeaders({
      "WWW-Authenticate": challenge({
        error: "insufficient_scope",
        scope,
        error_description: error.description,
        resource_metadata: protectedResourceMetadataUrl(resource),
      }),
    });
  }
  return error;
}

function invalidToken(description: string): OAuthError {
  return new OAuthError(401, "invalid_token", description);
}

function sessionEnded(): OAuthError {
  return invalidToken("The session was revoked or has expired");
}

/** `Bearer k="v", ...` with each value reduced to what an RFC 6750 quoted string may hold. */
function challenge(params: Record<string, string>): string {
  const quoted = Object.entries(params).map(([name, value]) =>
    `${name}="${value.replace(/[^\x20-\x21\x23-\x5B\x5D-\x7E]/g, "")}"`
  );
  return `Bearer ${quoted.join(", ")}`;
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
