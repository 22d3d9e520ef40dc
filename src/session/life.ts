/**
 * A session's life, in one place: a sign-in creates it with a single-use code (and it lives no
 * longer than the code until that is redeemed); the code's exchange and every refresh mint an
 * access token and rotate the refresh token; only the current refresh token is accepted, except,
 * opt-in, the previous one within its grace window; opt-in, the previous one presented after
 * that ends the session. Routes call these; the store keeps the records.
 *
 * @see spec §2.3, §2.5, §2.6, §3.3, §4.3, RFC 9700 §4.14.2
 */

import type { Clock } from "../clock.ts";
import type { SessionConfig } from "./config.ts";
import type { TokenSigner } from "../jwt.ts";
import { GRANTED_SCOPES } from "../scopes.ts";
import type { FlowCompletion, RefreshGrace, Store, Versioned } from "../store/mod.ts";
import type { FlowRecord, SessionAccess, SessionRecord } from "../store/records.ts";
import { newSessionToken, refreshTokenHash } from "../store/session_tokens.ts";
import { withRenewalsHeldOff } from "./renewal_lease.ts";
import type { UpstreamUser } from "../upstream/types.ts";

/** Authorization code lifetime (spec §8). */
export const CODE_TTL_MS = 10 * 60 * 1000;

/** Attempts at a session transition that something else (an upstream refresh) may race. */
const RACED_TRANSITION_ATTEMPTS = 5;

/** What an authorization request asked that its code must remember. */
export type SignInRequest = Pick<
  FlowRecord,
  | "clientId"
  | "codeChallenge"
  | "codeChallengeMethod"
  | "redirectUri"
  | "redirectUriImplied"
  | "resource"
>;

/** The upstream side of a sign-in: the user's tokens, sealed, and when they expire. */
export interface UpstreamGrant {
  sealedTokens: string;
  /** Epoch ms; 0 when the upstream gave no `expires_in`. */
  expiresAt: number;
  user: UpstreamUser;
  /** What admitted the user, when a list restricts who may sign in. */
  access?: SessionAccess;
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
  config: Pick<
    SessionConfig,
    | "accessTokenTtlSeconds"
    | "sessionIdleTtlSeconds"
    | "accessTokenAudience"
    | "revokeOnRefreshReplay"
  >;
}

/** What refresh-replay detection needs. */
export interface ReplayDeps {
  store: Store;
  clock: Clock;
  config: Pick<SessionConfig, "revokeOnRefreshReplay" | "refreshGraceSeconds">;
}

/** What the refresh grace needs. */
export interface GraceDeps {
  store: Store;
  clock: Clock;
  config: Pick<SessionConfig, "refreshGraceSeconds">;
}

/**
 * A completed sign-in: a new session with service tokens unset (spec §3.3) and the single-use
 * code that names it (spec §2.2), to be stored in one commit. The session lives only as long as
 * the code until the code's exchange gives it the inactivity lifetime: a code never redeemed
 * leaves no session behind.
 */
export function newSignIn(
  request: SignInRequest,
  upstream: UpstreamGrant,
  nowMs: number,
): FlowCompletion {
  const session = newSession(
    request.clientId,
    upstream,
    nowMs,
    CODE_TTL_MS / 1000,
    request.resource,
  );
  const { clientId, codeChallenge, codeChallengeMethod, redirectUri, redirectUriImplied } = request;
  return {
    code: newSessionToken(session.id),
    codeRecord: {
      sessionId: session.id,
      clientId,
      codeChallenge,
      codeChallengeMethod,
      redirectUri,
      ...(redirectUriImplied ? { redirectUriImplied } : {}),
      expiresAt: session.expiresAt,
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
    ...(upstream.access === undefined ? {} : { access: upstream.access }),
    scopes: [...GRANTED_SCOPES],
    createdAt: nowMs,
    updatedAt: nowMs,
    expiresAt: nowMs + idleTtlSeconds * 1000,
  };
}

/**
 * Mints an access token (spec §2.6) and a new refresh token, and the session that records
 * them: its refresh-token hash, the access token's expiry, and a renewed inactivity lifetime;
 * with REVOKE_ON_REFRESH_REPLAY, also the hash of the token it replaces. The token names the
 * session's resource (RFC 8707), or `protectedResource` for a session from before resource
 * indicators; `aud` is the client id unless ACCESS_TOKEN_AUDIENCE says `resource`.
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
      sub: session.upstreamUserId,
      aud: config.accessTokenAudience === "resource" ? resource : session.clientId,
      sid: session.id,
      scope,
      gitlab_user: session.upstreamUsername,
      resource,
      client_id: session.clientId,
    },
    now,
    ttl,
  );
  const { replacedRefresh: _older, ...current } = session;
  const replaced = config.revokeOnRefreshReplay && session.mcpRefreshTokenHash
    ? { replacedRefresh: { hash: session.mcpRefreshTokenHash, rotatedAt: now } }
    : {};
  return {
    body: {
      access_token: accessToken,
      token_type: "Bearer",
      expires_in: ttl,
      refresh_token: refreshToken,
      scope,
    },
    session: {
      ...current,
      ...replaced,
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

/**
 * Whether `token` is the one `session`'s last rotation replaced and its grace answer is still
 * there to take (REFRESH_GRACE_SECONDS): a retry the grant checks as it checked the first.
 */
export function hasRefreshGrace(session: SessionRecord, token: string, nowMs: number): boolean {
  const grace = session.previousRefresh;
  return grace?.hash === refreshTokenHash(token) && nowMs <= grace.untilMs;
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
): Promise<{ body: TokenResponseBody; session: SessionRecord } | null> {
  if (config.refreshGraceSeconds === 0) return null;
  const hash = refreshTokenHash(token);
  // Retried only when something else (an upstream refresh by the gateway) saved the session in
  // between; a rotation or another taker ends the grace, which the next read sees.
  for (let attempt = 0; attempt < RACED_TRANSITION_ATTEMPTS; attempt++) {
    const session = await store.getSessionNamedBy(token);
    const grace = session?.value.previousRefresh;
    if (!session || grace?.hash !== hash || clock.now() > grace.untilMs) return null;
    const taken = await store.takeRefreshGrace(session);
    if (taken.kind === "taken") return { body: JSON.parse(taken.response), session: session.value };
    if (taken.kind === "unusable") return null;
  }
  return null;
}

/**
 * Opt-in (REVOKE_ON_REFRESH_REPLAY, RFC 9700 §4.14.2): when `token` is exactly the refresh token
 * its session's last rotation replaced, presented after any grace window, the token was used by
 * two parties and the session ends. Answers the session as deleted (for the caller to revoke its
 * GitLab token), or null when nothing ended: detection off, not that exact token, inside the
 * grace window, or a concurrent replay ended it first.
 */
export async function endSessionOnRefreshReplay(
  { store, clock, config }: ReplayDeps,
  token: string,
): Promise<SessionRecord | null> {
  if (!config.revokeOnRefreshReplay) return null;
  const first = await store.getSessionNamedBy(token);
  if (!first || !isReplayedRefreshToken(first.value, token, clock.now(), config)) return null;
  return await endSessionAsItIsNow(store, first);
}

/** How `endSessionAsItIsNow` reads a session again, and whether the caller holds off renewals. */
export interface EndingOptions {
  /** Reads the session again after a change (the operator's CLI reads one it cannot open too). */
  reread?: (id: string) => Promise<Versioned<SessionRecord> | null>;
  /** The caller holds the session's renewal lease already (a renewal GitLab refused). */
  renewalsHeldOff?: boolean;
}

/**
 * Ends the session `read`, whatever it has become since it was read (a rotation or an upstream
 * refresh saved it in between): answers the record as deleted, with the GitLab tokens it held
 * last, for the caller to revoke; null when it is gone (whoever ended it revokes them).
 * Each attempt deletes it only as last read; when every one lost (its client refreshing without
 * pause, or a thief racing the user's /revoke), the last deletes it as it is, with GitLab
 * renewals held off: revocation wins, and what it deleted still holds the GitLab tokens read.
 */
export async function endSessionAsItIsNow(
  store: Pick<Store, "deleteSessionIfUnchanged" | "deleteSession" | "getSession" | "tryLease">,
  read: Versioned<SessionRecord>,
  options: EndingOptions = {},
): Promise<SessionRecord | null> {
  const reread = options.reread ?? ((id: string) => store.getSession(id));
  const id = read.value.id;
  let session: Versioned<SessionRecord> | null = read;
  for (let attempt = 1; session && attempt < RACED_TRANSITION_ATTEMPTS; attempt++) {
    if (await store.deleteSessionIfUnchanged(session)) return session.value;
    session = await reread(id);
  }
  if (!session) return null;
  const deleteAsItIs = () => deleteAsReadNow(store, id, reread);
  return options.renewalsHeldOff
    ? await deleteAsItIs()
    : await withRenewalsHeldOff(store, id, deleteAsItIs);
}

/**
 * Reads the session and deletes it whatever is saved meanwhile: only a renewal changes its
 * GitLab tokens, and the caller holds renewals off, so the record deleted holds those read.
 */
async function deleteAsReadNow(
  store: Pick<Store, "deleteSession">,
  id: string,
  reread: (id: string) => Promise<Versioned<SessionRecord> | null>,
): Promise<SessionRecord | null> {
  const session = await reread(id);
  if (!session) return null;
  await store.deleteSession(id);
  return session.value;
}

function isReplayedRefreshToken(
  session: SessionRecord,
  token: string,
  nowMs: number,
  config: Pick<SessionConfig, "refreshGraceSeconds">,
): boolean {
  const replaced = session.replacedRefresh;
  if (replaced === undefined || replaced.hash !== refreshTokenHash(token)) return false;
  const graceMs = config.refreshGraceSeconds * 1000;
  // The grace window is inclusive, as takeRefreshGrace's is.
  return graceMs === 0 || nowMs > replaced.rotatedAt + graceMs;
}
