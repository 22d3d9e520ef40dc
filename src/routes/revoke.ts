/**
 * `POST /revoke`: ends the session a refresh token (its current one, or the previous one while its
 * grace lasts) or live access token belongs to, and revokes the session's upstream token (best
 * effort). An expired access token ends nothing; a machine caller's live one, which has no
 * session, is `unsupported_token_type`.
 *
 * @see RFC 7009 §2
 */

import type { Clock } from "../clock.ts";
import type { RequestContext } from "../http/request_context.ts";
import { machineKindOf, type TokenSigner } from "../jwt.ts";
import type { Metrics } from "../metrics/catalog.ts";
import type { EndDeps } from "../session/end.ts";
import type { Upstream } from "../upstream/types.ts";
import { OAuthError } from "../http/errors.ts";
import { readParams } from "../http/params.ts";
import { NO_STORE } from "../http/responses.ts";
import { endSession } from "../session/end.ts";
import { hasRefreshGrace, isCurrentRefreshToken } from "../session/life.ts";
import type { Versioned } from "../store/mod.ts";
import type { SessionRecord } from "../store/records.ts";

/** What revocation uses: the sessions, the signer that reads access tokens, and how sessions end. */
type RevokeContext =
  & RequestContext<
    & Omit<EndDeps, "upstream">
    & {
      clock: Clock;
      config: { requestBodyTimeoutMs: number };
      metrics: Pick<Metrics, "revocations">;
    }
  >
  & { oauth: { signer: Pick<TokenSigner, "readSigned">; upstream: Upstream } };

/** Handles `POST /revoke`; 200 for known and unknown tokens alike (RFC 7009 §2.2). */
export async function handleRevoke(ctx: RevokeContext): Promise<Response> {
  const params = await readParams(ctx.request, ctx.deps.config.requestBodyTimeoutMs);
  const token = params.get("token");
  if (!token) throw new OAuthError(400, "invalid_request", "token is required");

  const session = await findSession(ctx, token, params.get("token_type_hint"));
  const ended = session !== null &&
    await endSession({ ...ctx.deps, upstream: ctx.oauth.upstream }, session, {
      requestId: ctx.requestId,
    });
  ctx.deps.metrics.revocations.inc({ outcome: ended ? "session_ended" : "no_session" });
  if (ended) {
    ctx.deps.logger.info("session revoked", {
      requestId: ctx.requestId,
      sessionId: session.value.id,
    });
  }
  return new Response(null, { status: 200, headers: NO_STORE });
}

/** The session a token names; the hint only decides which kind is tried first. */
async function findSession(
  ctx: RevokeContext,
  token: string,
  hint: string | undefined,
): Promise<Versioned<SessionRecord> | null> {
  const lookups = [() => bySignedAccessToken(ctx, token), () => byRefreshToken(ctx, token)];
  if (hint === "refresh_token") lookups.reverse();
  for (const lookup of lookups) {
    const session = await lookup();
    if (session) return session;
  }
  return null;
}

async function bySignedAccessToken(
  ctx: RevokeContext,
  token: string,
): Promise<Versioned<SessionRecord> | null> {
  if (token.split(".").length !== 3) return null;
  const claims = await ctx.oauth.signer.readSigned(token);
  if (typeof claims?.sid !== "string") return null;
  // A leaked token past its expiry must not log its user out.
  if (typeof claims.exp !== "number" || claims.exp * 1000 <= ctx.deps.clock.now()) return null;
  const session = await ctx.deps.store.getSession(claims.sid);
  if (!session && typeof claims.sub === "string" && machineKindOf(claims.sub) !== undefined) {
    throw unrevocableMachineToken();
  }
  return session;
}

/**
 * A machine caller's live token has no session to end and lives until its `exp`: a 200 would
 * tell the caller it is revoked (RFC 7009 §2.2.1 has this error for a type not revoked).
 */
function unrevocableMachineToken(): OAuthError {
  return new OAuthError(
    400,
    "unsupported_token_type",
    "A machine caller's access token cannot be revoked; it lives until its exp " +
      "(an operator ends a machine client with admin clients delete)",
  );
}

/**
 * The session of a refresh token still worth something: its current one, or the one its last
 * rotation replaced while REFRESH_GRACE_SECONDS lets it fetch the new pair (a client that lost
 * that answer logs out with the token it holds; a 200 must leave it worth nothing).
 */
async function byRefreshToken(
  ctx: RevokeContext,
  token: string,
): Promise<Versioned<SessionRecord> | null> {
  const session = await ctx.deps.store.getSessionNamedBy(token);
  if (!session) return null;
  const { value } = session;
  const worth = isCurrentRefreshToken(value, token) ||
    hasRefreshGrace(value, token, ctx.deps.clock.now());
  return worth ? session : null;
}
