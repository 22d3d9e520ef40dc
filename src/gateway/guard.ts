/**
 * The resource server's check of our tokens: an MCP request's `Authorization: Bearer` access
 * token, the session behind it and its scope, and the session's GitLab token kept fresh. The
 * gateway and the library's `createResourceGuard` (library.ts) both run this one check.
 * Refusals are BearerChallengeErrors (challenges.ts), answered as RFC 6750 §3 says.
 *
 * @see RFC 6750 §3, RFC 9728 §5.1, MCP authorization spec ("Access Token Usage")
 */

import { errors } from "jose";
import type { Clock } from "../clock.ts";
import { OAuthError } from "../http/errors.ts";
import { type AccessTokenClaims, machineKindOf, type TokenSigner } from "../jwt.ts";
import type { Logger } from "../logger.ts";
import { ensureFreshUpstreamToken, UpstreamRefreshFailed } from "../session/upstream_refresh.ts";
import type { Store, Versioned } from "../store/mod.ts";
import type { SessionAccess, SessionRecord } from "../store/records.ts";
import { type Upstream, UpstreamError } from "../upstream/types.ts";
import { type AccessGate, requireStillAdmitted } from "./access_gate.ts";
import { BearerChallengeError } from "./challenges.ts";
import { bearerToken, isBearerTokenSyntax } from "../http/bearer_token.ts";
import { sameResource } from "../http/resource.ts";
import type { VerifiedToken, VerifiedTokens } from "./verified_tokens.ts";
import { type MachineAdmission, type MachineCaller, MachineRefused } from "../machine/caller.ts";

/** Leeway on `exp` for clocks that disagree a little. */
export const CLOCK_TOLERANCE_SECONDS = 30;
/**
 * Leeway on `iat` in the future and on `exp` beyond the issued lifetime: a token from the future
 * or one that outlives what the service issues was not signed by this service's token endpoint.
 */
export const ISSUE_SKEW_SECONDS = 60;
/** Suggested wait after a transient GitLab failure left no usable token. */
const RETRY_AFTER_SECONDS = "5";

/** The GitLab user a request acts for. */
export interface AuthenticatedUser {
  /** The provider's user id (GitLab's, as text). */
  id: string;
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

/** What the gateway knows of a request: the authentication, and what the session learnt. */
export interface GatewayRequest extends AuthenticatedRequest {
  /** The session's group levels from sign-in and re-check, for MCP_POLICY_FILE. */
  access?: SessionAccess;
  /** When the access token expires (its verified `exp`): a stream it opened ends then. */
  tokenExpiresAtMs: number;
  /**
   * A machine caller (a CI job, a registered client) and its rule in force; absent: a person.
   * Its `sessionId` is its token's own `sid` (no session is stored) and `gitlabToken` is empty.
   */
  machine?: MachineCaller;
}

/** Whose tokens are accepted, and which protected resource the challenges point at. */
export interface GuardTarget {
  /** Expected `iss`: the service's base URL. */
  issuer: string;
  /** The protected resource; its metadata URL goes into every challenge. */
  resource: string;
  /**
   * Refuses a token naming no resource (signed before resource indicators, for `/mcp`): set at
   * an MCP_SERVERS_FILE server, where such a token is not valid (docs/gateway.md).
   */
  refusesUnbound?: boolean;
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
  /** The longest access-token lifetime issued (ACCESS_TOKEN_TTL); `exp` beyond it is refused. */
  accessTokenTtlSeconds: number;
  /** The scope every request needs; undefined: the caller checks scopes itself, per call. */
  requiredScope?: string;
  /** Tokens accepted within the last second, so a burst of calls is checked once. */
  verifiedTokens: VerifiedTokens;
  /** UPSTREAM_TIMEOUT_MS, which the GitLab token refresh's lease outlasts. */
  upstreamTimeoutMs?: number;
  /** The gateway's re-check of who may sign in; absent (the library's guard): none. */
  accessGate?: AccessGate;
  /** Admits machine callers' tokens by the rules in force; absent: they are refused. */
  machineAdmission?: MachineAdmission;
}

/**
 * Authenticates one request for a target. Throws a BearerChallengeError when the request may
 * not pass, and a 503 OAuthError when GitLab could not renew an already expired token.
 */
export async function authenticate(
  deps: GuardDeps,
  request: Request,
  target: GuardTarget,
): Promise<AuthenticatedRequest> {
  const authorization = request.headers.get("authorization");
  const { access: _access, tokenExpiresAtMs: _expires, machine: _machine, ...auth } =
    await authenticateForGateway(
      deps,
      authorization,
      target,
    );
  return auth;
}

/**
 * As `authenticate`, from the request's `Authorization` header (which the gateway has read with
 * the others), with the session's access record the guard has read anyway (or remembered with
 * the token), so the gateway's policy costs no KV read. A refusal may be thrown rather than
 * returned as a rejected promise.
 */
export function authenticateForGateway(
  deps: GuardDeps,
  authorization: string | null,
  target: GuardTarget,
): GatewayRequest | Promise<GatewayRequest> {
  const token = bearerToken(authorization);
  if (token === undefined) throw BearerChallengeError.authenticationRequired(target.resource);
  const remembered = deps.verifiedTokens.get(token, target.issuer, deps.clock.now());
  // A token accepted within the last second is answered at once: no promise on the hot path.
  if (remembered) return accepted(deps, remembered, target);
  return verifyAndAccept(deps, token, target);
}

/** The full check of a token not in memory: a person's (with its session) or a machine's. */
async function verifyAndAccept(
  deps: GuardDeps,
  token: string,
  target: GuardTarget,
): Promise<GatewayRequest> {
  // Before the first verification only: a token read from memory passed it.
  if (!isBearerTokenSyntax(token)) {
    throw BearerChallengeError.invalidToken(target.resource, "The access token is malformed");
  }
  const claims = await verifyToken(deps, token, target);
  requireResource(claims, target);
  if (machineKindOf(claims.sub) !== undefined) return await machineRequest(deps, claims, target);
  return accepted(deps, await verifyAndRemember(deps, token, claims, target), target);
}

/**
 * A machine caller's request: no session, no GitLab refresh, never remembered (its rule in
 * force is looked up on every call).
 */
async function machineRequest(
  deps: GuardDeps,
  claims: AccessTokenClaims,
  target: GuardTarget,
): Promise<GatewayRequest> {
  let machine: MachineCaller;
  try {
    if (!deps.machineAdmission) throw new MachineRefused("This resource admits no machine callers");
    machine = await deps.machineAdmission.admit(claims as unknown as Record<string, unknown>);
  } catch (error) {
    if (!(error instanceof MachineRefused)) throw error;
    throw BearerChallengeError.invalidToken(target.resource, error.message);
  }
  requireScope(claims, deps.requiredScope, target.resource);
  return {
    user: { id: claims.sub, username: claims.sub },
    scopes: claims.scope.split(" ").filter((scope) => scope !== ""),
    clientId: machine.clientId,
    sessionId: claims.sid,
    gitlabToken: "",
    tokenExpiresAtMs: expiryOf(claims),
    machine,
  };
}

/** The request a verified (or remembered) token stands for, once it holds for `target`. */
function accepted(deps: GuardDeps, found: VerifiedToken, target: GuardTarget): GatewayRequest {
  requireResource(found.claims, target);
  requireScope(found.claims, deps.requiredScope, target.resource);
  return authenticated(found);
}

/**
 * The rest of a person's token's check: session, scope, a fresh GitLab token. What passed is
 * remembered for the next calls (verified_tokens.ts).
 */
async function verifyAndRemember(
  deps: GuardDeps,
  token: string,
  claims: AccessTokenClaims,
  target: GuardTarget,
): Promise<VerifiedToken> {
  const session = await liveSession(deps, claims, target.resource);
  requireScope(claims, deps.requiredScope, target.resource);
  const refreshed = await freshSession(deps, session, target.resource);
  const fresh = deps.accessGate
    ? await requireStillAdmitted(deps, deps.accessGate, refreshed, target.resource)
    : refreshed;
  const upstreamTokens = await deps.store.openUpstreamTokens(fresh);
  if (!upstreamTokens) throw sessionEnded(target.resource);
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

async function verifyToken(
  deps: GuardDeps,
  token: string,
  { issuer, resource }: GuardTarget,
): Promise<AccessTokenClaims> {
  let claims: AccessTokenClaims;
  try {
    claims = await deps.signer.verify(token, issuer, deps.clock.now(), deps.clockToleranceSeconds);
  } catch (error) {
    throw BearerChallengeError.invalidToken(resource, describeJoseError(error));
  }
  const { sid, sub, scope } = claims as Partial<Record<keyof AccessTokenClaims, unknown>>;
  if (typeof sid !== "string" || typeof sub !== "string" || typeof scope !== "string") {
    throw BearerChallengeError.invalidToken(resource, "The access token lacks required claims");
  }
  requirePlausibleTimes(deps, claims, resource);
  return claims;
}

/** `iat` not in the future and `exp` not beyond the issued lifetime, each with a minute's leeway. */
function requirePlausibleTimes(
  deps: GuardDeps,
  claims: AccessTokenClaims,
  resource: string,
): void {
  const { iat, exp } = claims as { iat?: unknown; exp?: unknown };
  const nowSeconds = deps.clock.now() / 1000;
  if (typeof iat !== "number" || iat > nowSeconds + ISSUE_SKEW_SECONDS) {
    throw BearerChallengeError.invalidToken(resource, "The access token's issue time is invalid");
  }
  const latestExp = nowSeconds + deps.accessTokenTtlSeconds + ISSUE_SKEW_SECONDS;
  if (typeof exp !== "number" || exp > latestExp) {
    throw BearerChallengeError.invalidToken(resource, "The access token's expiry is invalid");
  }
}

/**
 * RFC 8707: a token bound to another MCP server is refused here even when that server shares
 * our secret. Tokens from before resource indicators carry no `resource`: they were for `/mcp`,
 * so are accepted unless the target refuses them.
 */
function requireResource(
  claims: AccessTokenClaims,
  { resource, refusesUnbound }: GuardTarget,
): void {
  const bound: unknown = claims.resource;
  // The same string is the common case, and needs no URL parsing on every call.
  if (bound === resource || (bound === undefined && !refusesUnbound)) return;
  if (typeof bound !== "string" || !sameResource(bound, resource)) {
    throw BearerChallengeError.invalidToken(
      resource,
      "The access token was issued for another resource",
    );
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
  // A retired key (removed by a rotation) or one never held: say so, not "malformed".
  if (error instanceof errors.JWKSNoMatchingKey) return "The access token's key is not known";
  if (error instanceof errors.JOSEError) return "The access token is malformed";
  throw error;
}

/** The session the token names, if it still exists and belongs to the token's user. */
async function liveSession(
  deps: GuardDeps,
  claims: AccessTokenClaims,
  resource: string,
): Promise<Versioned<SessionRecord>> {
  const session = await deps.store.getSession(claims.sid);
  if (!session || session.value.upstreamUserId !== claims.sub) {
    throw sessionEnded(resource);
  }
  return session;
}

function requireScope(
  claims: AccessTokenClaims,
  scope: string | undefined,
  resource: string,
): void {
  if (scope !== undefined && !claims.scope.split(" ").includes(scope)) {
    throw BearerChallengeError.insufficientScope(resource, scope);
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
  resource: string,
): Promise<SessionRecord> {
  let fresh: Versioned<SessionRecord> | null;
  try {
    fresh = await ensureFreshUpstreamToken(deps, session);
  } catch (error) {
    if (!(error instanceof UpstreamRefreshFailed)) throw error;
    return refreshFailed(deps, session.value, error, resource);
  }
  if (!fresh) throw sessionEnded(resource);
  return fresh.value;
}

function refreshFailed(
  deps: GuardDeps,
  session: SessionRecord,
  error: UpstreamRefreshFailed,
  resource: string,
): SessionRecord {
  const terminal = error.cause instanceof UpstreamError && error.cause.failure === "terminal";
  const { displayName } = deps.upstream.profile;
  deps.logger.warn(`${displayName} token refresh failed`, {
    sessionId: session.id,
    terminal,
    error: String(error.cause),
  });
  if (terminal) {
    throw BearerChallengeError.invalidToken(
      resource,
      `${displayName} no longer accepts this sign-in; sign in again`,
    );
  }
  if (session.upstreamTokenExpiry > deps.clock.now()) return session;
  throw new OAuthError(
    503,
    "temporarily_unavailable",
    `${displayName} could not renew the token; try again`,
    { "Retry-After": RETRY_AFTER_SECONDS },
  );
}

function authenticated(
  { claims, session, upstreamToken, expiresAtMs }: VerifiedToken,
): GatewayRequest {
  return {
    user: { id: session.upstreamUserId, username: session.upstreamUsername },
    scopes: claims.scope.split(" ").filter((scope) => scope !== ""),
    clientId: session.clientId,
    sessionId: session.id,
    gitlabToken: upstreamToken,
    access: session.access,
    tokenExpiresAtMs: expiresAtMs,
  };
}

function sessionEnded(resource: string): BearerChallengeError {
  return BearerChallengeError.invalidToken(resource, "The session was revoked or has expired");
}
