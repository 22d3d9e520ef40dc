/**
 * What a session is made of, and keeping its GitLab token fresh. Shared by the poll (which
 * creates sessions) and the token endpoint (which refreshes them).
 *
 * @see spec §2.3, §3.3, §4.3.2 step 3
 */

import type { Clock } from "./clock.ts";
import type { OAuthDeps } from "./context.ts";
import type { FlowRecord, SessionRecord, UpstreamTokenSet } from "./records.ts";
import type { Store, Versioned } from "./store.ts";
import type { UpstreamTokens, UpstreamUser } from "./upstream/types.ts";

/** Granted scopes are always these two; the requested `scope` is not used (spec §1.6). */
export const GRANTED_SCOPES = ["mcp:tools", "mcp:resources"] as const;

/** Refresh the GitLab token when it expires within this (spec §8). */
export const UPSTREAM_REFRESH_BUFFER_MS = 5 * 60 * 1000;

/** How long one instance may hold a session's upstream-refresh lease. */
const REFRESH_LEASE_MS = 30_000;
/** How long a caller waits for another instance's refresh of the same session. */
const REFRESH_WAIT_MS = 35_000;
const REFRESH_WAIT_STEP_MS = 25;
const SAVE_ATTEMPTS = 5;

/** What refreshing a GitLab token needs: the service's AppDeps, or a resource guard's. */
export interface RefreshDeps {
  store: Store;
  clock: Clock;
  oauth?: Pick<OAuthDeps, "upstream">;
}

/** The GitLab token could not be refreshed (spec: `Failed to refresh underlying upstream token`). */
export class UpstreamRefreshFailed extends Error {
  constructor(cause: unknown) {
    super("upstream refresh failed", { cause });
    this.name = "UpstreamRefreshFailed";
  }
}

/** A new session for a completed flow, with service tokens unset (spec §3.3). */
export function newSession(
  flow: FlowRecord,
  gitlab: { sealedTokens: string; expiresAt: number },
  user: UpstreamUser,
  now: number,
  idleTtlSeconds: number,
): SessionRecord {
  return {
    id: crypto.randomUUID(),
    mcpRefreshTokenHash: "",
    mcpTokenExpiry: 0,
    sealedGitLabTokens: gitlab.sealedTokens,
    gitlabTokenExpiry: gitlab.expiresAt,
    gitlabUserId: user.id,
    gitlabUsername: user.username,
    clientId: flow.clientId,
    scopes: [...GRANTED_SCOPES],
    createdAt: now,
    updatedAt: now,
    expiresAt: now + idleTtlSeconds * 1000,
  };
}

/** Upstream tokens with their lifetime turned into an absolute expiry (0: none given). */
export function tokenSet(tokens: UpstreamTokens, now: number): UpstreamTokenSet {
  return {
    accessToken: tokens.accessToken,
    refreshToken: tokens.refreshToken,
    expiresAt: tokens.expiresInSeconds === undefined ? 0 : now + tokens.expiresInSeconds * 1000,
  };
}

/** True when the GitLab token expires within the buffer or already has. */
export function upstreamExpiring(session: SessionRecord, now: number): boolean {
  return session.gitlabTokenExpiry !== 0 &&
    session.gitlabTokenExpiry - now <= UPSTREAM_REFRESH_BUFFER_MS;
}

/**
 * Returns the session with a GitLab token that is not about to expire, refreshing it first if
 * needed. Refreshes of one session are serialised through a KV lease, so parallel callers on
 * any instance never spend the same GitLab refresh token twice: the others wait and then read
 * what the winner stored. Null when the session is gone afterwards.
 * Throws UpstreamRefreshFailed when GitLab refuses.
 */
export async function ensureFreshUpstreamToken(
  deps: RefreshDeps,
  session: Versioned<SessionRecord>,
): Promise<Versioned<SessionRecord> | null> {
  const { store, clock } = deps;
  if (!upstreamExpiring(session.value, clock.now())) return session;
  const id = session.value.id;
  const deadline = Date.now() + REFRESH_WAIT_MS;
  while (Date.now() < deadline) {
    const lease = await store.tryLease("upstream-refresh", id, REFRESH_LEASE_MS);
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
  { store, clock, oauth }: RefreshDeps,
  current: Versioned<SessionRecord>,
): Promise<Versioned<SessionRecord> | null> {
  const opened = await store.openGitLabTokens(current.value);
  if (!opened) throw new UpstreamRefreshFailed(new Error("GitLab tokens cannot be opened"));
  if (!opened.refreshToken) {
    throw new UpstreamRefreshFailed(new Error("GitLab issued no refresh token"));
  }
  let tokens: UpstreamTokenSet;
  try {
    tokens = tokenSet(await oauth!.upstream.refreshTokens(opened.refreshToken), clock.now());
  } catch (error) {
    throw new UpstreamRefreshFailed(error);
  }
  const sealedGitLabTokens = await store.sealGitLabTokens({
    accessToken: tokens.accessToken,
    refreshToken: tokens.refreshToken || opened.refreshToken,
  });
  // GitLab has spent the old refresh token: the new one must land even if the session moved.
  let latest: Versioned<SessionRecord> | null = current;
  for (let attempt = 0; latest && attempt < SAVE_ATTEMPTS; attempt++) {
    const saved = await store.saveSession(latest, {
      ...latest.value,
      sealedGitLabTokens,
      gitlabTokenExpiry: tokens.expiresAt,
      updatedAt: clock.now(),
    });
    if (saved) return saved;
    latest = await store.getSession(current.value.id);
  }
  return latest;
}
