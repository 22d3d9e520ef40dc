/**
 * A session's life, in one place: a sign-in creates it with a single-use code; the code's
 * exchange and every refresh mint an access token and rotate the refresh token; only the
 * current refresh token is accepted, except, opt-in, the previous one within its grace window.
 * Routes call these; the store keeps the records.
 *
 * @see spec §2.3, §2.5, §2.6, §3.3, §4.3
 */

import type { Clock } from "../clock.ts";
import type { Config } from "../config.ts";
import type { TokenSigner } from "../jwt.ts";
import { GRANTED_SCOPES } from "../scopes.ts";
import type { FlowCompletion, RefreshGrace, Store, Versioned } from "../store/mod.ts";
import type { FlowRecord, SessionRecord } from "../store/records.ts";
import { newSessionToken, refreshTokenHash } from "../store/session_tokens.ts";
import type { UpstreamUser } from "../upstream/types.ts";

/** Authorization code lifetime (spec §8). */
export const CODE_TTL_MS = 10 * 60 * 1000;

const TAKE_GRACE_ATTEMPTS = 5;

/** What an authorization request asked that its code must remember. */
export type SignInRequest = Pick<
  FlowRecord,
  "clientId" | "codeChallenge" | "codeChallengeMethod" | "redirectUri" | "resource"
>;

/** The upstream side of a sign-in: the user's tokens, sealed, and when they expire. */
export interface UpstreamGrant {
  sealedTokens: string;
  /** Epoch ms; 0 when the upstream gave no `expires_in`. */
  expiresAt: number;
  user: UpstreamUser;
}

/** The token response of spec §2.5. */
export interface TokenResponseBody {
  access_token: string;
  token_type: "Bearer";
  expires_in: number;
  refresh_token: string;
  scope: string;
}

/** A token response and the session that records it, to be committed together. */
export interface IssuedTokens {
  body: TokenResponseBody;
  session: SessionRecord;
}

/** What minting tokens needs. */
export interface IssueDeps {
  signer: Pick<TokenSigner, "sign">;
  clock: Clock;
  config: Pick<Config, "accessTokenTtlSeconds" | "sessionIdleTtlSeconds" | "accessTokenAudience">;
}

/** What the refresh grace needs. */
export interface GraceDeps {
  store: Store;
  clock: Clock;
  config: Pick<Config, "refreshGraceSeconds">;
}

/**
 * A completed sign-in: a new session with service tokens unset (spec §3.3) and the single-use
 * code that names it (spec §2.2), to be stored in one commit.
 */
export function newSignIn(
  request: SignInRequest,
  upstream: UpstreamGrant,
  nowMs: number,
  idleTtlSeconds: number,
): FlowCompletion {
  const session = newSession(request.clientId, upstream, nowMs, idleTtlSeconds, request.resource);
  const { clientId, codeChallenge, codeChallengeMethod, redirectUri } = request;
  return {
    code: newSessionToken(session.id),
    codeRecord: {
      sessionId: session.id,
      clientId,
      codeChallenge,
      codeChallengeMethod,
      redirectUri,
      expiresAt: nowMs + CODE_TTL_MS,
    },
    session,
  };
}

/** A new session for a signed-in user, with service tokens unset (spec §3.3). */
export function newSession(
  clientId: string,
  upstream: UpstreamGrant,
  nowMs: number,
  idleTtlSeconds: number,
  resource?: string,
): SessionRecord {
  return {
    id: crypto.randomUUID(),
    mcpRefreshTokenHash: "",
    mcpTokenExpiry: 0,
    sealedUpstreamTokens: upstream.sealedTokens,
    upstreamTokenExpiry: upstream.expiresAt,
    upstreamUserId: upstream.user.id,
    upstreamUsername: upstream.user.username,
    clientId,
    ...(resource === undefined ? {} : { resource }),
    scopes: [...GRANTED_SCOPES],
    createdAt: nowMs,
    updatedAt: nowMs,
    expiresAt: nowMs + idleTtlSeconds * 1000,
  };
}

/**
 * Mints an access token (spec §2.6) and a new refresh token, and the session that records
 * them: its refresh-token hash, the access token's expiry, and a renewed inactivity lifetime.
 * The token names the session's resource (RFC 8707), or `protectedResource` for a session
 * from before resource indicators; `aud` is the client id unless ACCESS_TOKEN_AUDIENCE says
 * `resource`.
 */
export async function issueTokens(
  { signer, clock, config }: IssueDeps,
  session: SessionRecord,
  issuer: string,
  protectedResource: string,
): Promise<IssuedTokens> {
  const now = clock.now();
  const ttl = config.accessTokenTtlSeconds;
  const scope = session.scopes.join(" ");
  const refreshToken = newSessionToken(session.id);
  const resource = session.resource ?? protectedResource;
  const accessToken = await signer.sign(
    {
      iss: issuer,
      sub: String(session.upstreamUserId),
      aud: config.accessTokenAudience === "resource" ? resource : session.clientId,
      sid: session.id,
      scope,
      gitlab_user: session.upstreamUsername,
      resource,
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
      mcpRefreshTokenHash: refreshTokenHash(refreshToken),
      mcpTokenExpiry: now + ttl * 1000,
      updatedAt: now,
      expiresAt: now + config.sessionIdleTtlSeconds * 1000,
    },
  };
}

/** Whether `token` is the session's current refresh token (spec §4.3.2 step 2). */
export function isCurrentRefreshToken(session: SessionRecord, token: string): boolean {
  return session.mcpRefreshTokenHash === refreshTokenHash(token);
}

/** The live session whose current refresh token `token` is, or null. */
export async function findSessionByRefreshToken(
  store: Store,
  token: string,
): Promise<Versioned<SessionRecord> | null> {
  const session = await store.getSessionNamedBy(token);
  return session && isCurrentRefreshToken(session.value, token) ? session : null;
}

/** Opt-in (REFRESH_GRACE_SECONDS): what the previous token may fetch once more, and until when. */
export function refreshGraceFor(
  { clock, config }: Pick<GraceDeps, "clock" | "config">,
  body: TokenResponseBody,
): RefreshGrace | undefined {
  const graceMs = config.refreshGraceSeconds * 1000;
  return graceMs > 0
    ? { untilMs: clock.now() + graceMs, response: JSON.stringify(body) }
    : undefined;
}

/**
 * Opt-in (REFRESH_GRACE_SECONDS): the response kept for a rotated refresh token presented again
 * within its window, once; null when there is none, it was used, or the session moved on.
 */
export async function takeRefreshGrace(
  { store, clock, config }: GraceDeps,
  token: string,
): Promise<TokenResponseBody | null> {
  if (config.refreshGraceSeconds === 0) return null;
  const hash = refreshTokenHash(token);
  // Retried only when something else (an upstream refresh by the gateway) saved the session in
  // between; a rotation or another taker ends the grace, which the next read sees.
  for (let attempt = 0; attempt < TAKE_GRACE_ATTEMPTS; attempt++) {
    const session = await store.getSessionNamedBy(token);
    const grace = session?.value.previousRefresh;
    if (!session || grace?.hash !== hash || clock.now() > grace.untilMs) return null;
    const taken = await store.takeRefreshGrace(session);
    if (taken.kind === "taken") return JSON.parse(taken.response);
    if (taken.kind === "unusable") return null;
  }
  return null;
}
