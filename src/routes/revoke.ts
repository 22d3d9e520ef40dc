/**
 * `POST /revoke`: ends the session a refresh token or access token belongs to, and revokes
 * the session's upstream token (best effort).
 *
 * @see RFC 7009 §2
 */

import type { OAuthRequestContext } from "../context.ts";
import { OAuthError } from "../errors.ts";
import { NO_STORE, readParams } from "../http.ts";
import { redact } from "../logger.ts";
import { findSessionByRefreshToken } from "../session/life.ts";
import type { SessionRecord } from "../store/records.ts";

/** Handles `POST /revoke`; 200 for known and unknown tokens alike (RFC 7009 §2.2). */
export async function handleRevoke(ctx: OAuthRequestContext): Promise<Response> {
  const params = await readParams(ctx.request);
  const token = params.get("token");
  if (!token) throw new OAuthError(400, "invalid_request", "token is required");

  const session = await findSession(ctx, token, params.get("token_type_hint"));
  if (session) await endSession(ctx, session);
  return new Response(null, { status: 200, headers: NO_STORE });
}

/** The session a token names; the hint only decides which kind is tried first. */
async function findSession(
  ctx: OAuthRequestContext,
  token: string,
  hint: string | undefined,
): Promise<SessionRecord | null> {
  const lookups = [() => bySignedAccessToken(ctx, token), () => byRefreshToken(ctx, token)];
  if (hint === "refresh_token") lookups.reverse();
  for (const lookup of lookups) {
    const session = await lookup();
    if (session) return session;
  }
  return null;
}

async function bySignedAccessToken(
  ctx: OAuthRequestContext,
  token: string,
): Promise<SessionRecord | null> {
  if (token.split(".").length !== 3) return null;
  const claims = await ctx.oauth.signer.readSigned(token);
  if (typeof claims?.sid !== "string") return null;
  return (await ctx.deps.store.getSession(claims.sid))?.value ?? null;
}

async function byRefreshToken(
  ctx: OAuthRequestContext,
  token: string,
): Promise<SessionRecord | null> {
  return (await findSessionByRefreshToken(ctx.deps.store, token))?.value ?? null;
}

async function endSession(ctx: OAuthRequestContext, session: SessionRecord): Promise<void> {
  const { store, logger, verifiedTokens } = ctx.deps;
  await store.deleteSession(session.id);
  verifiedTokens.forgetSession(session.id);
  logger.info("session revoked", { requestId: ctx.requestId, sessionId: session.id });
  const upstreamTokens = await store.openUpstreamTokens(session);
  if (!upstreamTokens) return;
  try {
    await ctx.oauth.upstream.revokeToken(upstreamTokens.accessToken);
  } catch (error) {
    logger.warn("GitLab token revocation failed", {
      requestId: ctx.requestId,
      sessionId: session.id,
      gitlabToken: redact(upstreamTokens.accessToken),
      error: String(error),
    });
  }
}
