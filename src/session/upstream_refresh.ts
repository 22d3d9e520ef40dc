/**
 * Keeping a session's upstream token fresh: refreshed within five minutes of its expiry, one
 * refresh per session at a time across every instance (a KV lease), so the upstream refresh
 * token is never spent twice.
 *
 * @see spec §4.3.2 step 3, §8
 */

import type { Clock } from "../clock.ts";
import type { Logger } from "../logger.ts";
import type { Store, Versioned } from "../store/mod.ts";
import { type SessionRecord, upstreamTokenSet } from "../store/records.ts";
import { type Upstream, UpstreamError } from "../upstream/types.ts";
import { afterSessionEnded, type EndDeps } from "./end.ts";
import { endSessionAsItIsNow } from "./life.ts";
import { RENEWAL_LEASE } from "./renewal_lease.ts";

/** Refresh the upstream token when it expires within this (spec §8). */
export const UPSTREAM_REFRESH_BUFFER_MS = 5 * 60 * 1000;

/**
 * The shortest a session's upstream-refresh lease is held; longer when the upstream's time
 * limit is: the lease must outlast the refresh call, or a second instance would take it and
 * spend the same refresh token.
 */
const MIN_REFRESH_LEASE_MS = 30_000;
/** What a caller waits beyond a lease for another instance's refresh of the same session. */
const REFRESH_WAIT_MARGIN_MS = 5_000;
const REFRESH_WAIT_STEP_MS = 25;
const SAVE_ATTEMPTS = 5;

/** What refreshing an upstream token needs. */
export interface RefreshDeps {
  store: Store;
  clock: Clock;
  upstream: Upstream;
  logger: Logger;
  /** Forgets the access tokens of a session a refused renewal ends (the gateway's memory). */
  verifiedTokens: EndDeps["verifiedTokens"];
  /** UPSTREAM_TIMEOUT_MS: how long one upstream call may take (the lease outlasts it). */
  upstreamTimeoutMs?: number;
}

/** How long a refresh lease is held: twice the upstream's time limit and a margin, or more. */
function refreshLeaseMs(upstreamTimeoutMs: number | undefined): number {
  return Math.max(MIN_REFRESH_LEASE_MS, 2 * (upstreamTimeoutMs ?? 0) + 5_000);
}

/** The upstream token could not be refreshed (spec: `Failed to refresh underlying upstream token`). */
export class UpstreamRefreshFailed extends Error {
  constructor(cause: unknown) {
    super("upstream refresh failed", { cause });
    this.name = "UpstreamRefreshFailed";
  }
}

/** True when the upstream token expires within the buffer or already has. */
export function upstreamExpiring(session: SessionRecord, now: number): boolean {
  return session.upstreamTokenExpiry !== 0 &&
    session.upstreamTokenExpiry - now <= UPSTREAM_REFRESH_BUFFER_MS;
}

/**
 * Returns the session with an upstream token that is not about to expire, refreshing it first
 * if needed. Refreshes of one session are serialised through a KV lease, so parallel callers on
 * any instance never spend the same upstream refresh token twice: the others wait and then read
 * what the winner stored. Null when the session is gone afterwards.
 * Throws UpstreamRefreshFailed when the upstream refuses.
 */
export async function ensureFreshUpstreamToken(
  deps: RefreshDeps,
  session: Versioned<SessionRecord>,
): Promise<Versioned<SessionRecord> | null> {
  const { store, clock } = deps;
  if (!upstreamExpiring(session.value, clock.now())) return session;
  const id = session.value.id;
  const leaseMs = refreshLeaseMs(deps.upstreamTimeoutMs);
  const deadline = Date.now() + leaseMs + REFRESH_WAIT_MARGIN_MS;
  while (Date.now() < deadline) {
    const lease = await store.tryLease(RENEWAL_LEASE, id, leaseMs);
    if (!lease) {
      // Another caller is refreshing: wait, then take what it stored if it is done.
      await new Promise((resolve) => setTimeout(resolve, REFRESH_WAIT_STEP_MS));
      const current = await store.getSession(id);
      if (!current || !upstreamExpiring(current.value, clock.now())) return current;
      continue;
    }
    try {
      const current = await store.getSession(id);
      if (!current || !upstreamExpiring(current.value, clock.now())) return current;
      return await refreshAndSave(deps, current);
    } finally {
      await lease.release();
    }
  }
  throw new UpstreamRefreshFailed(new Error("timed out waiting for a concurrent refresh"));
}

async function refreshAndSave(
  deps: RefreshDeps,
  current: Versioned<SessionRecord>,
): Promise<Versioned<SessionRecord> | null> {
  const { store, clock, upstream } = deps;
  const opened = await store.openUpstreamTokens(current.value);
  if (!opened) throw new UpstreamRefreshFailed(new Error("upstream tokens cannot be opened"));
  if (!opened.refreshToken) {
    throw new UpstreamRefreshFailed(new Error("the upstream issued no refresh token"));
  }
  let tokens;
  try {
    tokens = upstreamTokenSet(await upstream.refreshTokens(opened.refreshToken), clock.now());
  } catch (error) {
    if (isRefusedGrant(error)) await endRefusedSession(deps, current);
    throw new UpstreamRefreshFailed(error);
  }
  const sealedUpstreamTokens = await store.sealUpstreamTokens({
    accessToken: tokens.accessToken,
    refreshToken: tokens.refreshToken || opened.refreshToken,
  });
  // The upstream has spent the old refresh token: the new one must land even if the session
  // moved.
  let latest: Versioned<SessionRecord> | null = current;
  for (let attempt = 0; latest && attempt < SAVE_ATTEMPTS; attempt++) {
    const saved = await store.saveSession(latest, {
      ...latest.value,
      sealedUpstreamTokens,
      upstreamTokenExpiry: tokens.expiresAt,
      updatedAt: clock.now(),
    });
    if (saved) return saved;
    latest = await store.getSession(current.value.id);
  }
  // Ended while GitLab renewed its token: whoever ended it revoked the token it read, and this
  // new one, held by nobody now, would otherwise live on at GitLab.
  if (!latest) await revokeOrphaned(deps, tokens.accessToken, current.value.id);
  return latest;
}

/**
 * GitLab's `invalid_grant`: the session's GitLab refresh token will never work again (revoked,
 * spent). Not `invalid_client` and the like, which an operator's fix cures for every session.
 */
function isRefusedGrant(error: unknown): boolean {
  return error instanceof UpstreamError && error.code === "invalid_grant";
}

/**
 * Ends a session whose renewal GitLab refused, under the lease: the callers waiting for it find
 * it gone instead of sending the refused token again, and so do the requests after them.
 */
async function endRefusedSession(
  deps: RefreshDeps,
  current: Versioned<SessionRecord>,
): Promise<void> {
  const ended = await endSessionAsItIsNow(deps.store, current, { renewalsHeldOff: true });
  if (!ended) return;
  const { displayName } = deps.upstream.profile;
  deps.logger.warn(`session ended: ${displayName} refused its token renewal`, {
    sessionId: ended.id,
  });
  await afterSessionEnded(deps, ended, {});
}

async function revokeOrphaned(
  { upstream, logger }: RefreshDeps,
  accessToken: string,
  sessionId: string,
): Promise<void> {
  try {
    await upstream.revokeToken(accessToken);
  } catch (error) {
    logger.warn("renewed GitLab token of an ended session not revoked", {
      sessionId,
      error: String(error),
    });
  }
}
