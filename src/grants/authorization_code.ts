/**
 * The `authorization_code` grant with PKCE: a single-use code, redeemed once for the session's
 * first tokens; checks in the spec's order.
 *
 * @see spec §4.3.1, RFC 6749 §4.1.3, RFC 7636 §4.6
 */

import { endSessionAsItIsNow } from "../session/life.ts";
import { verifyPkce } from "../sign_in/pkce.ts";
import { OAuthError } from "../http/errors.ts";
import type { Versioned } from "../store/mod.ts";
import type { SessionRecord } from "../store/records.ts";
import type { Grant, GrantDeps, GrantRequest, Issued } from "./grant.ts";
import {
  afterGrantEndedSession,
  invalidGrant,
  issueForSession,
  requireSameClient,
  sessionTokens,
} from "./session_checks.ts";

/** The grant's module. */
export const AUTHORIZATION_CODE_GRANT: Grant = {
  type: "authorization_code",
  registrable: true,
  issue: exchangeCode,
};

async function exchangeCode(deps: GrantDeps, request: GrantRequest): Promise<Issued> {
  const { store, clock, config } = deps;
  const { params } = request;
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
      await revokeReplayedCodeSession(deps, request, code.value.sessionId, session);
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
    await requireSameClient(deps, request.client.clientId, code.value.clientId, "code");
  }

  const issued = await issueForSession(deps, request, session.value);
  const keepRedeemedMarker = config.revokeOnCodeReplay;
  if (!await store.redeemCode(code, session, issued.session, { keepRedeemedMarker })) {
    // A concurrent exchange of the same code won the commit.
    throw invalidGrant("Invalid authorization code");
  }
  return sessionTokens(issued.session, issued.body);
}

/**
 * Opt-in (REVOKE_ON_CODE_REPLAY): a code used twice was probably stolen, so the session its
 * first use created ends (RFC 6749 §4.1.2), whatever it has become since, and its GitLab token
 * with it (best effort; once, by the replay whose checked delete wins).
 */
async function revokeReplayedCodeSession(
  deps: GrantDeps,
  request: GrantRequest,
  sessionId: string,
  session: Versioned<SessionRecord> | null,
): Promise<void> {
  deps.logger.warn("authorization code replayed; session revoked", {
    requestId: request.requestId,
    sessionId,
  });
  const ended = session && await endSessionAsItIsNow(deps.store, session);
  if (ended) {
    await afterGrantEndedSession(deps, ended, request);
  } else {
    await deps.store.deleteSession(sessionId);
    // The gateway's memory of accepted tokens must not keep serving the ended session here.
    deps.verifiedTokens.forgetSession(sessionId);
  }
}
