/**
 * Ending sessions: the record goes, its MCP session bindings too, and the GitLab token it held
 * is revoked, best effort (a GitLab that does not answer must not keep a session alive). Also the sweeps of sign-ins whose
 * code expired unredeemed, and of sessions that expired idle.
 *
 * @see RFC 7009 §2, RFC 9700 §4.14.2
 */

import type { LogFields, Logger } from "../logger.ts";
import { redact } from "../logger.ts";
import type { Store, Versioned } from "../store/mod.ts";
import type { Taken } from "../store/takes.ts";
import type { SessionRecord, UpstreamTokenPair } from "../store/records.ts";
import type { Upstream } from "../upstream/types.ts";
import { endSessionAsItIsNow } from "./life.ts";

/** At most this many abandoned sign-ins are revoked per sweep (their revocations run in parallel). */
const SWEEP_LIMIT = 5;

/**
 * At most this many idle sessions are ended per sweep (in parallel): once a minute, 28,800 a
 * day, a pace GitLab's rate limits take.
 */
const IDLE_SWEEP_LIMIT = 20;

/** What ending a session needs. */
export interface EndDeps {
  store: Store;
  logger: Logger;
  upstream: Upstream;
  /** What remembers the session's access tokens as accepted (the gateway's memory). */
  verifiedTokens: { forgetSession(sessionId: string): void };
}

/**
 * Deletes the session as it is now, then revokes the GitLab token it held last (best effort): a
 * renewal saved since `read` must not leave its new token behind. False when it was gone.
 */
export async function endSession(
  deps: EndDeps,
  read: Versioned<SessionRecord>,
  fields: LogFields,
): Promise<boolean> {
  const ended = await endSessionAsItIsNow(deps.store, read);
  if (ended) await afterSessionEnded(deps, ended, fields);
  return ended !== null;
}

/**
 * What follows a session's deletion: its access tokens are no longer accepted from this
 * process's memory, its MCP session bindings go, and its GitLab token is revoked (best effort).
 */
export async function afterSessionEnded(
  deps: EndDeps,
  session: SessionRecord,
  fields: LogFields,
): Promise<void> {
  deps.verifiedTokens.forgetSession(session.id);
  await Promise.all([
    revokeUpstreamTokens(deps, session, { ...fields, sessionId: session.id }),
    unbindMcpSessions(deps, session.id, fields),
  ]);
}

/** The session's MCP session bindings end with it; a failure is logged (they expire anyway). */
async function unbindMcpSessions(deps: EndDeps, sessionId: string, fields: LogFields) {
  try {
    await deps.store.unbindMcpSessionsOf(sessionId);
  } catch (error) {
    deps.logger.warn("MCP session bindings not removed", {
      ...fields,
      sessionId,
      error: String(error),
    });
  }
}

/**
 * Revokes the GitLab token sealed in `sealed` (revoking the access token ends its refresh token
 * too); a failure is logged, never thrown. Answers whether GitLab confirmed the revocation.
 */
export async function revokeUpstreamTokens(
  deps: Pick<EndDeps, "store" | "logger" | "upstream">,
  sealed: Pick<SessionRecord, "sealedUpstreamTokens">,
  fields: LogFields,
): Promise<boolean> {
  const tokens = await deps.store.openUpstreamTokens(sealed);
  if (!tokens) return false;
  return await revokeOpenedUpstreamTokens(deps, tokens, fields);
}

/**
 * Revokes GitLab tokens already opened (the operator's CLI opens every one before it deletes
 * anything); a failure is logged, never thrown. Answers whether GitLab confirmed it.
 */
export async function revokeOpenedUpstreamTokens(
  deps: Pick<EndDeps, "logger" | "upstream">,
  tokens: UpstreamTokenPair,
  fields: LogFields,
): Promise<boolean> {
  try {
    await deps.upstream.revokeToken(tokens.accessToken);
    return true;
  } catch (error) {
    deps.logger.warn(`${deps.upstream.profile.displayName} token revocation failed`, {
      ...fields,
      gitlabToken: redact(tokens.accessToken),
      error: String(error),
    });
    return false;
  }
}

/**
 * Revokes the GitLab tokens of sign-ins whose code expired unredeemed (their sessions are
 * deleted with them). Run where sign-ins complete, so abandoned ones are swept at the pace they
 * are made; a few per call keeps the caller's latency bounded. Never throws.
 */
export async function sweepAbandonedSignIns(deps: EndDeps, fields: LogFields): Promise<void> {
  let abandoned;
  try {
    abandoned = await deps.store.takeAbandonedSignIns(SWEEP_LIMIT);
  } catch (error) {
    // The sign-in that runs the sweep has completed; a failed sweep is left to the next one.
    deps.logger.warn("sweep of unredeemed sign-ins failed", { ...fields, error: String(error) });
    return;
  }
  logFailedTakes(deps, abandoned, "sweep of an unredeemed sign-in failed", fields);
  await Promise.all(abandoned.taken.map((signIn) => {
    deps.logger.info("unredeemed sign-in ended", { ...fields, sessionId: signIn.sessionId });
    return revokeUpstreamTokens(deps, signIn, { ...fields, sessionId: signIn.sessionId });
  }));
  await sweepStrandedTokens(deps, fields);
}

/**
 * Revokes the GitLab tokens of device flows that expired holding one (GitLab issued it, the
 * user lookup kept failing, the page stopped polling). Never throws.
 */
async function sweepStrandedTokens(deps: EndDeps, fields: LogFields): Promise<void> {
  let stranded;
  try {
    stranded = await deps.store.takeStrandedTokens(SWEEP_LIMIT);
  } catch (error) {
    deps.logger.warn("sweep of abandoned device flows failed", { ...fields, error: String(error) });
    return;
  }
  logFailedTakes(deps, stranded, "sweep of an abandoned device flow failed", fields);
  await Promise.all(stranded.taken.map((tokens) => {
    deps.logger.info("device flow expired holding a GitLab token: revoking it", fields);
    return revokeUpstreamTokens(deps, tokens, fields);
  }));
}

/**
 * Ends sessions that expired idle (SESSION_IDLE_TTL without a refresh), a few per call: their
 * MCP session bindings go and their GitLab tokens are revoked (best effort), which nobody else
 * would do. Never throws.
 */
export async function sweepIdleSessions(deps: EndDeps, fields: LogFields): Promise<void> {
  let idle;
  try {
    idle = await deps.store.takeIdleSessions(IDLE_SWEEP_LIMIT);
  } catch (error) {
    deps.logger.warn("sweep of idle sessions failed", { ...fields, error: String(error) });
    return;
  }
  logFailedTakes(deps, idle, "sweep of an idle session failed", fields);
  await Promise.all(idle.taken.map((session) => {
    deps.logger.info("idle session ended", { ...fields, sessionId: session.id });
    return afterSessionEnded(deps, session, fields);
  }));
}

/** One warning per take the database failed: its record is left for the next sweep. */
function logFailedTakes(
  deps: Pick<EndDeps, "logger">,
  { errors }: Taken<unknown>,
  message: string,
  fields: LogFields,
): void {
  for (const error of errors) deps.logger.warn(message, { ...fields, error: String(error) });
}
