/**
 * `POST /token`: the `authorization_code` grant (with PKCE) and the rotating `refresh_token`
 * grant.
 *
 * @see spec §4.3, RFC 6749 §4.1.3 and §6, RFC 7636 §4.6
 */

import type { RequestContext } from "../context.ts";
import { sha256Base64Url } from "../crypto.ts";
import { notConfiguredError, OAuthError } from "../errors.ts";
import { json, NO_STORE, readParams } from "../http.ts";
import { redact } from "../logger.ts";
import { verifyPkce } from "../pkce.ts";
import type { SessionRecord } from "../records.ts";
import { newSessionToken } from "../session_tokens.ts";
import { ensureFreshUpstreamToken, UpstreamRefreshFailed } from "../sessions.ts";
import type { Versioned } from "../store.ts";

/** The token response of spec §2.5. */
export interface TokenResponseBody {
  access_token: string;
  token_type: "Bearer";
  expires_in: number;
  refresh_token: string;
  scope: string;
}

/** Handles `POST /token`. */
export async function handleToken(ctx: RequestContext): Promise<Response> {
  if (!ctx.deps.oauth) throw notConfiguredError();
  const params = await readParams(ctx.request);
  const grantType = params.get("grant_type");
  if (grantType === "authorization_code") return await exchangeCode(ctx, params);
  if (grantType === "refresh_token") return await refresh(ctx, params);
  throw new OAuthError(
    400,
    "unsupported_grant_type",
    grantType ? `Grant type ${grantType} is not supported` : "Missing grant_type is not supported",
  );
}

/** Spec §4.3.1, checks in its order. */
async function exchangeCode(ctx: RequestContext, params: Map<string, string>): Promise<Response> {
  const { store, clock } = ctx.deps;
  const codeValue = params.get("code");
  if (!codeValue) throw new OAuthError(400, "invalid_request", "code is required");
  const verifier = params.get("code_verifier");
  if (!verifier) throw new OAuthError(400, "invalid_request", "code_verifier is required");

  const found = await store.getCodeAndSession(codeValue);
  if (!found) throw invalidGrant("Invalid authorization code");
  const { code, session } = found;
  if (code.value.redeemedAt !== undefined) {
    await revokeReplayedCodeSession(ctx, code.value.sessionId);
    throw invalidGrant("Invalid authorization code");
  }
  if (clock.now() > code.value.expiresAt) {
    await store.deleteCode(code);
    throw invalidGrant("Authorization code expired");
  }
  const { codeChallenge, codeChallengeMethod, redirectUri } = code.value;
  if (!verifyPkce(verifier, codeChallenge, codeChallengeMethod)) {
    throw invalidGrant("Invalid code_verifier");
  }
  if (redirectUri !== undefined && params.get("redirect_uri") !== redirectUri) {
    throw invalidGrant("redirect_uri does not match the authorization request");
  }
  if (!session) throw invalidGrant("Session not found");
  if (ctx.deps.config.redirectUriPolicy === "registered") {
    await requireSameClient(ctx, params.get("client_id"), code.value.clientId);
  }

  const issued = await issueTokens(ctx, session.value);
  const keepRedeemedMarker = ctx.deps.config.revokeOnCodeReplay;
  if (
    !await store.redeemCode(code, session, issued.session, { keepRedeemedMarker })
  ) {
    // A concurrent exchange of the same code won the commit.
    throw invalidGrant("Invalid authorization code");
  }
  logIssued(ctx, "authorization_code", issued.session, issued.body.refresh_token);
  return json(issued.body, 200, NO_STORE);
}

/** Spec §4.3.2. */
async function refresh(ctx: RequestContext, params: Map<string, string>): Promise<Response> {
  const { store } = ctx.deps;
  const refreshToken = params.get("refresh_token");
  if (!refreshToken) throw new OAuthError(400, "invalid_request", "refresh_token is required");
  const found = await store.findSessionByRefreshToken(refreshToken);
  if (!found) {
    const replay = await retryWithinGrace(ctx, refreshToken);
    if (replay) return replay;
    throw invalidGrant("Invalid refresh token");
  }

  let session: Versioned<SessionRecord> | null;
  try {
    session = await ensureFreshUpstreamToken(ctx.deps, found);
  } catch (error) {
    if (!(error instanceof UpstreamRefreshFailed)) throw error;
    ctx.deps.logger.warn("upstream refresh failed", {
      requestId: ctx.requestId,
      sessionId: found.value.id,
      error: String(error.cause),
    });
    throw invalidGrant("Failed to refresh underlying upstream token");
  }
  // Re-read after an upstream refresh: the token must still be the session's current one.
  if (!session || session.value.mcpRefreshTokenHash !== sha256Base64Url(refreshToken)) {
    throw invalidGrant("Invalid refresh token");
  }

  const issued = await issueTokens(ctx, session.value);
  const graceMs = ctx.deps.config.refreshGraceSeconds * 1000;
  const grace = graceMs > 0
    ? { untilMs: ctx.deps.clock.now() + graceMs, response: JSON.stringify(issued.body) }
    : undefined;
  if (
    !await store.rotateRefreshToken(session, issued.session, grace)
  ) {
    // A concurrent refresh with the same token rotated it first.
    throw invalidGrant("Invalid refresh token");
  }
  logIssued(ctx, "refresh_token", issued.session, issued.body.refresh_token);
  return json(issued.body, 200, NO_STORE);
}

/**
 * Opt-in (REVOKE_ON_CODE_REPLAY): a code used twice was probably stolen, so the session its
 * first use created ends (RFC 6749 §4.1.2).
 */
async function revokeReplayedCodeSession(ctx: RequestContext, sessionId: string): Promise<void> {
  await ctx.deps.store.deleteSession(sessionId);
  ctx.deps.logger.warn("authorization code replayed; session revoked", {
    requestId: ctx.requestId,
    sessionId,
  });
}

/**
 * Opt-in (REFRESH_GRACE_SECONDS): a client that lost the response to a refresh may present the
 * previous token once within the window and receives the same pair again.
 */
async function retryWithinGrace(
  ctx: RequestContext,
  refreshToken: string,
): Promise<Response | null> {
  if (ctx.deps.config.refreshGraceSeconds === 0) return null;
  const response = await ctx.deps.store.takeRefreshGrace(refreshToken);
  if (response === null) return null;
  ctx.deps.logger.info("refresh retried within grace", { requestId: ctx.requestId });
  return json(JSON.parse(response), 200, NO_STORE);
}

/** Mints an access token (spec §2.6) and a refresh token, and the session that records them. */
async function issueTokens(
  ctx: RequestContext,
  session: SessionRecord,
): Promise<{ body: TokenResponseBody; session: SessionRecord }> {
  const { clock, config, oauth } = ctx.deps;
  const now = clock.now();
  const ttl = config.accessTokenTtlSeconds;
  const scope = session.scopes.join(" ");
  const refreshToken = newSessionToken(session.id);
  const accessToken = await oauth!.signer.sign(
    {
      iss: ctx.baseUrl,
      sub: String(session.gitlabUserId),
      aud: session.clientId,
      sid: session.id,
      scope,
      gitlab_user: session.gitlabUsername,
    },
    now,
    ttl,
  );
  return {
    body: {
      access_token: accessToken,
      token_type: "Bearer",
      expires_in: ttl,
      refresh_token: refreshToken,
      scope,
    },
    session: {
      ...session,
      mcpRefreshTokenHash: sha256Base64Url(refreshToken),
      mcpTokenExpiry: now + ttl * 1000,
      updatedAt: now,
      expiresAt: now + config.sessionIdleTtlSeconds * 1000,
    },
  };
}

/**
 * Under REDIRECT_URI_POLICY=registered a public client identifies itself, and the code must
 * have been issued to it (RFC 6749 §4.1.3). The spec's default policy checks no client id.
 */
async function requireSameClient(
  ctx: RequestContext,
  clientId: string | undefined,
  codeClientId: string,
): Promise<void> {
  if (!clientId) throw new OAuthError(400, "invalid_request", "client_id is required");
  if (!await ctx.deps.store.getClient(clientId)) {
    throw new OAuthError(400, "invalid_client", "Unknown client_id");
  }
  if (clientId !== codeClientId) {
    throw invalidGrant("The code was issued to another client");
  }
}

function invalidGrant(description: string): OAuthError {
  return new OAuthError(400, "invalid_grant", description);
}

/** What was issued goes on the request's log line: one line per request, even under load. */
function logIssued(ctx: RequestContext, grant: string, session: SessionRecord, refresh: string) {
  Object.assign(ctx.logFields, {
    grant,
    sessionId: session.id,
    clientId: session.clientId,
    refreshToken: redact(refresh),
  });
}
