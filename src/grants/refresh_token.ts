/**
 * The rotating `refresh_token` grant: each refresh token is used once, answered again within
 * the grace window, and a replay may end the session; the user's GitLab token is refreshed
 * first when it is about to expire, and who may sign in is re-checked when due.
 *
 * @see spec §4.3.2, RFC 6749 §6, RFC 9700 §4.14.2
 */

import { OAuthError } from "../http/errors.ts";
import { recheckAccess } from "../session/access_recheck.ts";
import {
  endSessionAsItIsNow,
  endSessionOnRefreshReplay,
  hasRefreshGrace,
  isCurrentRefreshToken,
  issueTokens,
  refreshGraceFor,
  takeRefreshGrace,
} from "../session/life.ts";
import { ensureFreshUpstreamToken, UpstreamRefreshFailed } from "../session/upstream_refresh.ts";
import type { Versioned } from "../store/mod.ts";
import type { SessionRecord } from "../store/records.ts";
import type { Grant, GrantDeps, GrantRequest, Issued } from "./grant.ts";
import {
  afterGrantEndedSession,
  invalidGrant,
  protectedResource,
  requireSameClient,
  requireSessionResource,
  sessionTokens,
} from "./session_checks.ts";

/** The grant's module. */
export const REFRESH_TOKEN_GRANT: Grant = {
  type: "refresh_token",
  registrable: true,
  issue: refresh,
};

/** Rotations tried when something other than a rotation saved the session in between. */
const ROTATION_ATTEMPTS = 5;

async function refresh(deps: GrantDeps, request: GrantRequest): Promise<Issued> {
  const refreshToken = request.params.get("refresh_token");
  if (!refreshToken) throw new OAuthError(400, "invalid_request", "refresh_token is required");
  let named = await deps.store.getSessionNamedBy(refreshToken);
  for (let attempt = 0; attempt < ROTATION_ATTEMPTS; attempt++) {
    if (!named || !isCurrentRefreshToken(named.value, refreshToken)) {
      return await answerAgainOrRefuse(deps, request, refreshToken, named);
    }
    const rotated = await rotate(deps, request, refreshToken, named);
    if (rotated) return rotated;
    // The session changed since it was read. A rotation with the same token makes this request
    // a replay of a rotated-away token, as if it had come a moment later (grace, replay
    // detection); a save by the gateway (GitLab tokens, an access decision) leaves it current.
    named = await deps.store.getSessionNamedBy(refreshToken);
  }
  throw invalidGrant("Invalid refresh token");
}

/**
 * Rotates the current refresh token `refreshToken` of `found`: the new pair, or null when the
 * session changed before the rotation could be stored.
 */
async function rotate(
  deps: GrantDeps,
  request: GrantRequest,
  refreshToken: string,
  found: Versioned<SessionRecord>,
): Promise<Issued | null> {
  const { store, clock, logger } = deps;
  await requireRefreshingClient(deps, request, found.value.clientId);
  requireSessionResource(deps, request, found.value);

  let session: Versioned<SessionRecord> | null;
  try {
    session = await ensureFreshUpstreamToken({
      store,
      clock,
      upstream: deps.upstream,
      logger,
      verifiedTokens: deps.verifiedTokens,
      upstreamTimeoutMs: deps.config.upstreamTimeoutMs,
    }, found);
  } catch (error) {
    if (!(error instanceof UpstreamRefreshFailed)) throw error;
    logger.warn("upstream refresh failed", {
      requestId: request.requestId,
      sessionId: found.value.id,
      error: String(error.cause),
    });
    throw invalidGrant("Failed to refresh underlying upstream token");
  }
  // Re-read after an upstream refresh: the token must still be the session's current one.
  if (!session) throw invalidGrant("Invalid refresh token");
  if (!isCurrentRefreshToken(session.value, refreshToken)) return null;

  const admitted = await requireStillAdmitted(deps, request, session);
  const issued = await issueTokens(
    deps,
    admitted,
    request.issuer,
    protectedResource(deps, request.issuer),
  );
  const grace = refreshGraceFor(deps, issued.body);
  if (!await store.rotateRefreshToken(session, issued.session, grace)) return null;
  return sessionTokens(issued.session, issued.body);
}

/**
 * A token that is not its session's current one: the answer it got, again, within the grace
 * window (a lost answer retried); else `invalid_grant`, and under REVOKE_ON_REFRESH_REPLAY the
 * end of the session it was rotated away from.
 */
async function answerAgainOrRefuse(
  deps: GrantDeps,
  request: GrantRequest,
  refreshToken: string,
  named: Versioned<SessionRecord> | null,
): Promise<Issued> {
  const namesLiveSession = named !== null;
  if (named && hasRefreshGrace(named.value, refreshToken, deps.clock.now())) {
    // A retry is refused what the first request would have been refused.
    await requireRefreshingClient(deps, request, named.value.clientId);
    requireSessionResource(deps, request, named.value);
  }
  const replayed = await takeRefreshGrace(deps, refreshToken);
  if (!replayed) {
    const ended = await endReplayedSession(deps, request, refreshToken);
    // A token naming a live session that is not its current one was rotated away: a replay.
    if (namesLiveSession) {
      deps.metrics.refreshReplays.inc({ outcome: ended ? "session_ended" : "refused" });
    }
    throw invalidGrant("Invalid refresh token");
  }
  deps.metrics.refreshReplays.inc({ outcome: "grace" });
  deps.logger.info("refresh retried within grace", { requestId: request.requestId });
  return { ...sessionTokens(replayed.session, replayed.body), logFields: {} };
}

/**
 * ALLOWED_GITLAB_GROUPS / ALLOWED_GITLAB_USERS, re-checked when due: the session as it is to be
 * stored (with a new decision), or invalid_grant. A user no longer admitted ends the session:
 * its GitLab token is revoked and the gateway forgets its access tokens.
 */
async function requireStillAdmitted(
  deps: GrantDeps,
  request: GrantRequest,
  session: Versioned<SessionRecord>,
): Promise<SessionRecord> {
  const { store, clock, config, logger } = deps;
  const recheck = await recheckAccess(
    {
      store,
      clock,
      config,
      upstream: deps.upstream,
      rules: deps.accessRules(),
      serverLists: deps.serverLists(session.value.resource, request.issuer),
    },
    session.value,
  );
  if (recheck.kind === "admitted") return recheck.session;
  if (recheck.kind === "unconfirmed") {
    logger.warn("refresh refused: access could not be re-checked", {
      requestId: request.requestId,
      sessionId: session.value.id,
    });
    // Not invalid_grant: the session is kept, and a client that hears invalid_grant drops it.
    throw new OAuthError(
      503,
      "temporarily_unavailable",
      "Could not confirm that the account is still allowed here; try again later",
      { "Retry-After": "30" },
    );
  }
  logger.warn("session ended: account no longer allowed", {
    requestId: request.requestId,
    sessionId: session.value.id,
    gitlabUser: session.value.upstreamUsername,
    reason: recheck.reason,
  });
  const ended = await endSessionAsItIsNow(store, session);
  if (ended) await afterGrantEndedSession(deps, ended, request);
  throw invalidGrant("The account is no longer allowed to sign in here");
}

/**
 * Opt-in (REVOKE_ON_REFRESH_REPLAY): a rotated refresh token presented again ends its session
 * and its GitLab token (RFC 9700 §4.14.2); the replay is still answered invalid_grant.
 */
async function endReplayedSession(
  deps: GrantDeps,
  request: GrantRequest,
  refreshToken: string,
): Promise<boolean> {
  const ended = await endSessionOnRefreshReplay(deps, refreshToken);
  if (!ended) return false;
  deps.logger.warn("refresh token replayed; session revoked", {
    requestId: request.requestId,
    sessionId: ended.id,
  });
  await afterGrantEndedSession(deps, ended, request);
  return true;
}

/**
 * The refresh grant under REDIRECT_URI_POLICY=registered (SECURITY_PROFILE=strict): the client
 * identifies itself, must be known (else 401, so MCP clients register again) and must be the
 * session's (RFC 6749 §6). The spec's default checks no client_id in this grant. Before any
 * upstream refresh, so another client's request costs no GitLab call.
 */
async function requireRefreshingClient(
  deps: GrantDeps,
  request: GrantRequest,
  sessionClientId: string,
): Promise<void> {
  if (deps.config.redirectUriPolicy !== "registered") return;
  await requireSameClient(deps, request.client.clientId, sessionClientId, "refresh token");
}
