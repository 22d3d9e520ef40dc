/**
 * `POST /token`: the `authorization_code` grant (with PKCE) and the rotating `refresh_token`
 * grant, checks in the spec's order; what a session becomes is `src/session/life.ts`'s.
 *
 * @see spec §4.3, RFC 6749 §4.1.3 and §6, RFC 7636 §4.6
 */

import { endDepsOf, type OAuthRequestContext } from "../app/context.ts";
import { OAuthError } from "../http/errors.ts";
import { readParams } from "../http/params.ts";
import { json, NO_STORE } from "../http/responses.ts";
import { redact } from "../logger.ts";
import { verifyPkce } from "../sign_in/pkce.ts";
import { afterSessionEnded } from "../session/end.ts";
import {
  invalidTarget,
  mcpResourceUrl,
  requireProtectedResource,
  sameResource,
} from "../gateway/resource.ts";
import { isClientMetadataUrl } from "../client_metadata/document.ts";
import {
  endSessionAsItIsNow,
  endSessionOnRefreshReplay,
  isCurrentRefreshToken,
  issueTokens,
  refreshGraceFor,
  takeRefreshGrace,
  type TokenResponseBody,
} from "../session/life.ts";
import { ensureFreshUpstreamToken, UpstreamRefreshFailed } from "../session/upstream_refresh.ts";
import { recheckAccess } from "../session/access_recheck.ts";
import { heldPolicyGroups } from "../access/call_policy_file.ts";
import type { Versioned } from "../store/mod.ts";
import type { SessionRecord } from "../store/records.ts";

/** Handles `POST /token`. */
export async function handleToken(ctx: OAuthRequestContext): Promise<Response> {
  const params = await readParams(ctx.request, ctx.deps.config.requestBodyTimeoutMs);
  const grantType = params.get("grant_type");
  return await ctx.deps.metrics.countGrant(grantType, () => grant(ctx, params, grantType));
}

async function grant(
  ctx: OAuthRequestContext,
  params: Map<string, string>,
  grantType: string | undefined,
): Promise<Response> {
  if (grantType === "authorization_code") return await exchangeCode(ctx, params);
  if (grantType === "refresh_token") return await refresh(ctx, params);
  throw new OAuthError(
    400,
    "unsupported_grant_type",
    grantType ? `Grant type ${grantType} is not supported` : "Missing grant_type is not supported",
  );
}

/** Spec §4.3.1, checks in its order. */
async function exchangeCode(
  ctx: OAuthRequestContext,
  params: Map<string, string>,
): Promise<Response> {
  const { store, clock, config } = ctx.deps;
  const codeValue = params.get("code");
  if (!codeValue) throw new OAuthError(400, "invalid_request", "code is required");
  const verifier = params.get("code_verifier");
  if (!verifier) throw new OAuthError(400, "invalid_request", "code_verifier is required");

  const found = await store.getCodeAndSession(codeValue);
  if (!found) throw invalidGrant("Invalid authorization code");
  const { code, session } = found;
  if (code.value.redeemedAt !== undefined) {
    // Only a replay that also proves possession of the verifier ends the session: anyone who saw
    // the used code (a log, a referrer, browser history) could otherwise end it at will.
    if (verifyPkce(verifier, code.value.codeChallenge, code.value.codeChallengeMethod)) {
      await revokeReplayedCodeSession(ctx, code.value.sessionId, session);
    }
    throw invalidGrant("Invalid authorization code");
  }
  if (clock.now() > code.value.expiresAt) {
    await store.deleteCode(code);
    throw invalidGrant("Authorization code expired");
  }
  const { codeChallenge, codeChallengeMethod, redirectUri, redirectUriImplied } = code.value;
  if (!verifyPkce(verifier, codeChallenge, codeChallengeMethod)) {
    throw invalidGrant("Invalid code_verifier");
  }
  // Required when /authorize named it; when it was implied, may be left out, else must match.
  const sent = params.get("redirect_uri");
  const leftOut = redirectUriImplied === true && sent === undefined;
  if (redirectUri !== undefined && !leftOut && sent !== redirectUri) {
    throw invalidGrant("redirect_uri does not match the authorization request");
  }
  if (!session) throw invalidGrant("Session not found");
  if (config.redirectUriPolicy === "registered") {
    await requireSameClient(ctx, params.get("client_id"), code.value.clientId, "code");
  }
  requireSessionResource(ctx, params.get("resource"), session.value);

  const issued = await issueTokens(
    tokenDeps(ctx),
    session.value,
    ctx.baseUrl,
    protectedResource(ctx),
  );
  const keepRedeemedMarker = config.revokeOnCodeReplay;
  if (!await store.redeemCode(code, session, issued.session, { keepRedeemedMarker })) {
    // A concurrent exchange of the same code won the commit.
    throw invalidGrant("Invalid authorization code");
  }
  return issuedResponse(ctx, "authorization_code", issued.session, issued.body);
}

/** Spec §4.3.2. */
async function refresh(ctx: OAuthRequestContext, params: Map<string, string>): Promise<Response> {
  const { store, clock, logger } = ctx.deps;
  const refreshToken = params.get("refresh_token");
  if (!refreshToken) throw new OAuthError(400, "invalid_request", "refresh_token is required");
  const named = await store.getSessionNamedBy(refreshToken);
  const found = named && isCurrentRefreshToken(named.value, refreshToken) ? named : null;
  if (!found) {
    const replayed = await takeRefreshGrace(ctx.deps, refreshToken);
    if (!replayed) {
      const ended = await endReplayedSession(ctx, refreshToken);
      // A token naming a live session that is not its current one was rotated away: a replay.
      if (named) {
        ctx.deps.metrics.refreshReplays.inc({ outcome: ended ? "session_ended" : "refused" });
      }
      throw invalidGrant("Invalid refresh token");
    }
    ctx.deps.metrics.refreshReplays.inc({ outcome: "grace" });
    logger.info("refresh retried within grace", { requestId: ctx.requestId });
    return json(replayed, 200, NO_STORE);
  }
  await requireRefreshingClient(ctx, params.get("client_id"), found.value.clientId);
  requireSessionResource(ctx, params.get("resource"), found.value);

  let session: Versioned<SessionRecord> | null;
  try {
    session = await ensureFreshUpstreamToken({
      store,
      clock,
      upstream: ctx.oauth.upstream,
      upstreamTimeoutMs: ctx.deps.config.upstreamTimeoutMs,
    }, found);
  } catch (error) {
    if (!(error instanceof UpstreamRefreshFailed)) throw error;
    logger.warn("upstream refresh failed", {
      requestId: ctx.requestId,
      sessionId: found.value.id,
      error: String(error.cause),
    });
    throw invalidGrant("Failed to refresh underlying upstream token");
  }
  // Re-read after an upstream refresh: the token must still be the session's current one.
  if (!session || !isCurrentRefreshToken(session.value, refreshToken)) {
    throw invalidGrant("Invalid refresh token");
  }

  const admitted = await requireStillAdmitted(ctx, session);
  const issued = await issueTokens(
    tokenDeps(ctx),
    admitted,
    ctx.baseUrl,
    protectedResource(ctx),
  );
  const grace = refreshGraceFor(ctx.deps, issued.body);
  if (!await store.rotateRefreshToken(session, issued.session, grace)) {
    // A concurrent refresh with the same token rotated it first.
    throw invalidGrant("Invalid refresh token");
  }
  return issuedResponse(ctx, "refresh_token", issued.session, issued.body);
}

/**
 * ALLOWED_GITLAB_GROUPS / ALLOWED_GITLAB_USERS, re-checked when due: the session as it is to be
 * stored (with a new decision), or invalid_grant. A user no longer admitted ends the session:
 * its GitLab token is revoked and the gateway forgets its access tokens.
 */
async function requireStillAdmitted(
  ctx: OAuthRequestContext,
  session: Versioned<SessionRecord>,
): Promise<SessionRecord> {
  const { store, clock, config, logger } = ctx.deps;
  const recheck = await recheckAccess(
    {
      store,
      clock,
      config,
      upstream: ctx.oauth.upstream,
      policyGroups: heldPolicyGroups(ctx.deps.callPolicy),
    },
    session.value,
  );
  if (recheck.kind === "admitted") return recheck.session;
  if (recheck.kind === "unconfirmed") {
    logger.warn("refresh refused: access could not be re-checked", {
      requestId: ctx.requestId,
      sessionId: session.value.id,
    });
    throw invalidGrant("Could not confirm that the account is still allowed here; try again later");
  }
  logger.warn("session ended: account no longer allowed", {
    requestId: ctx.requestId,
    sessionId: session.value.id,
    gitlabUser: session.value.upstreamUsername,
    reason: recheck.reason,
  });
  const ended = await endSessionAsItIsNow(store, session);
  if (ended) await afterSessionEnded(endDepsOf(ctx), ended, { requestId: ctx.requestId });
  throw invalidGrant("The account is no longer allowed to sign in here");
}

/**
 * Opt-in (REVOKE_ON_CODE_REPLAY): a code used twice was probably stolen, so the session its
 * first use created ends (RFC 6749 §4.1.2), whatever it has become since, and its GitLab token
 * with it (best effort; once, by the replay whose checked delete wins).
 */
async function revokeReplayedCodeSession(
  ctx: OAuthRequestContext,
  sessionId: string,
  session: Versioned<SessionRecord> | null,
): Promise<void> {
  ctx.deps.logger.warn("authorization code replayed; session revoked", {
    requestId: ctx.requestId,
    sessionId,
  });
  const ended = session && await endSessionAsItIsNow(ctx.deps.store, session);
  if (ended) {
    await afterSessionEnded(endDepsOf(ctx), ended, { requestId: ctx.requestId });
  } else {
    await ctx.deps.store.deleteSession(sessionId);
    // The gateway's memory of accepted tokens must not keep serving the ended session here.
    ctx.deps.verifiedTokens.forgetSession(sessionId);
  }
}

/**
 * Opt-in (REVOKE_ON_REFRESH_REPLAY): a rotated refresh token presented again ends its session
 * and its GitLab token (RFC 9700 §4.14.2); the replay is still answered invalid_grant.
 */
async function endReplayedSession(
  ctx: OAuthRequestContext,
  refreshToken: string,
): Promise<boolean> {
  const ended = await endSessionOnRefreshReplay(ctx.deps, refreshToken);
  if (!ended) return false;
  ctx.deps.logger.warn("refresh token replayed; session revoked", {
    requestId: ctx.requestId,
    sessionId: ended.id,
  });
  await afterSessionEnded(endDepsOf(ctx), ended, { requestId: ctx.requestId });
  return true;
}

function tokenDeps(ctx: OAuthRequestContext) {
  return { signer: ctx.oauth.signer, clock: ctx.deps.clock, config: ctx.deps.config };
}

/**
 * Under REDIRECT_URI_POLICY=registered a public client identifies itself, and the code must
 * have been issued to it (RFC 6749 §4.1.3). The spec's default policy checks no client id.
 */
async function requireSameClient(
  ctx: OAuthRequestContext,
  clientId: string | undefined,
  grantClientId: string,
  grant: "code" | "refresh token",
): Promise<void> {
  if (!clientId) throw new OAuthError(400, "invalid_request", "client_id is required");
  // A metadata document client was checked against its document at /authorize; a registered
  // client that lost its registration gets 401, which makes MCP clients register again.
  if (!isClientMetadataUrl(clientId) && !await ctx.deps.store.getClient(clientId)) {
    throw new OAuthError(401, "invalid_client", "Unknown client_id");
  }
  if (clientId !== grantClientId) {
    throw invalidGrant(`The ${grant} was issued to another client`);
  }
}

/**
 * The refresh grant under REDIRECT_URI_POLICY=registered (SECURITY_PROFILE=strict): the client
 * identifies itself, must be known (else 401, so MCP clients register again) and must be the
 * session's (RFC 6749 §6). The spec's default checks no client_id in this grant. Before any
 * upstream refresh, so another client's request costs no GitLab call.
 */
async function requireRefreshingClient(
  ctx: OAuthRequestContext,
  clientId: string | undefined,
  sessionClientId: string,
): Promise<void> {
  if (ctx.deps.config.redirectUriPolicy !== "registered") return;
  await requireSameClient(ctx, clientId, sessionClientId, "refresh token");
}

function protectedResource(ctx: OAuthRequestContext): string {
  return mcpResourceUrl(ctx.deps.config, ctx.baseUrl);
}

/**
 * RFC 8707 §2.2: a `resource` at /token must be the protected MCP server and the one the
 * session was authorized for (a session from before resource indicators is for that server).
 */
function requireSessionResource(
  ctx: OAuthRequestContext,
  requested: string | undefined,
  session: SessionRecord,
): void {
  if (requested === undefined) return;
  requireProtectedResource(requested, protectedResource(ctx));
  if (session.resource !== undefined && !sameResource(requested, session.resource)) {
    throw invalidTarget("resource is not the one this grant was authorized for");
  }
}

function invalidGrant(description: string): OAuthError {
  return new OAuthError(400, "invalid_grant", description);
}

/**
 * The token response; what was issued goes on the request's log line (one line per request,
 * even under load).
 */
function issuedResponse(
  ctx: OAuthRequestContext,
  grant: string,
  session: SessionRecord,
  body: TokenResponseBody,
): Response {
  Object.assign(ctx.logFields, {
    grant,
    sessionId: session.id,
    clientId: session.clientId,
    refreshToken: redact(body.refresh_token),
  });
  return json(body, 200, NO_STORE);
}
