/**
 * Who may sign in, asked again at the gateway: a session whose decision is older than
 * ACCESS_RECHECK_SECONDS is re-checked before its request is forwarded, so a user removed from
 * a listed group loses the MCP server within that time, not at their next refresh. A refusal
 * ends the session (401); GitLab unable to answer past ACCESS_RECHECK_GRACE_SECONDS answers 503
 * and keeps the session.
 *
 * @see docs/security.md "Who can sign in"
 */

import type { AccessConfig } from "../access/config.ts";
import type { AccessPolicy } from "../access/policy.ts";
import type { AccessRules } from "../access/rules.ts";
import type { Clock } from "../clock.ts";
import { OAuthError } from "../http/errors.ts";
import type { Logger } from "../logger.ts";
import {
  type Recheck,
  recheckAccess,
  recheckDue,
  serverListsDecide,
} from "../session/access_recheck.ts";
import { afterSessionEnded } from "../session/end.ts";
import { endSessionAsItIsNow } from "../session/life.ts";
import type { Store } from "../store/mod.ts";
import type { SessionRecord } from "../store/records.ts";
import type { Upstream } from "../upstream/types.ts";
import { BearerChallengeError } from "./challenges.ts";
import type { VerifiedTokens } from "./verified_tokens.ts";

/** Suggested wait when GitLab could not confirm the decision. */
const RETRY_AFTER_SECONDS = "30";
/** Attempts at storing a new decision on a session something else saved meanwhile. */
const SAVE_ATTEMPTS = 3;

/**
 * After GitLab failed to answer a re-check whose decision still stands, the session's requests
 * go on without asking again for this long (never past the grace): an outage must not make every
 * call wait for GitLab's time limit.
 */
export const QUIET_AFTER_FAILURE_MS = 30_000;
/** Sessions remembered as quiet at once; the oldest goes first. */
const MAX_QUIET = 10_000;

/** What the gateway's re-check needs beyond the guard's own dependencies. */
export interface AccessGate {
  config: Pick<AccessConfig, "access">;
  /** Who may sign in as the lists in force say it. */
  rules(): AccessRules;
  /** The server's own lists (MCP_SERVERS_FILE), decided on every request from the session. */
  serverLists?: AccessPolicy;
  /** Per process: until when a session is not asked again after a failure (epoch ms). */
  quietUntil: Map<string, number>;
}

/** The re-check of the gateway `config`, the `rules` in force and the server's lists describe. */
export function createAccessGate(
  config: Pick<AccessConfig, "access">,
  rules: () => AccessRules,
  serverLists?: AccessPolicy,
): AccessGate {
  return { config, rules, serverLists, quietUntil: new Map() };
}

/** The guard's dependencies the re-check uses. */
export interface AccessGateDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  upstream: Upstream;
  verifiedTokens: Pick<VerifiedTokens, "forgetSession">;
}

/**
 * The session with a decision no older than ACCESS_RECHECK_SECONDS (asked again when due and
 * stored); throws 401 when the account is no longer admitted, 503 when GitLab could not say.
 */
export async function requireStillAdmitted(
  deps: AccessGateDeps,
  gate: AccessGate,
  session: SessionRecord,
  resource: string,
): Promise<SessionRecord> {
  const recheckDeps = {
    ...deps,
    config: gate.config,
    rules: gate.rules(),
    serverLists: gate.serverLists,
  };
  const now = deps.clock.now();
  const asks = recheckDue(recheckDeps, session) && (gate.quietUntil.get(session.id) ?? 0) <= now;
  const recheck: Recheck = asks
    ? await recheckAccess(recheckDeps, session)
    : serverListsDecide(gate.serverLists, session, recheckDeps.rules.roles);
  if (!asks && recheck.kind === "admitted") return session;
  if (recheck.kind === "admitted") {
    if (recheck.session !== session) return await saveDecision(deps, recheck.session);
    // Due, yet the same decision: GitLab failed and the decision stands (the grace).
    keepQuiet(gate, session, now);
    return session;
  }
  if (recheck.kind === "unconfirmed") {
    deps.logger.warn("gateway refused: access could not be re-checked", { sessionId: session.id });
    throw new OAuthError(
      503,
      "temporarily_unavailable",
      `${deps.upstream.profile.displayName} could not confirm that the account is still ` +
        "allowed here; try again later",
      { "Retry-After": RETRY_AFTER_SECONDS },
    );
  }
  deps.logger.warn("session ended: account no longer allowed", {
    sessionId: session.id,
    gitlabUser: session.upstreamUsername,
    reason: recheck.reason,
  });
  await endSession(deps, session);
  throw BearerChallengeError.invalidToken(resource, "The account is no longer allowed here");
}

/** Remembers `session` as quiet after a failure, until the pause or its grace ends. */
function keepQuiet(gate: AccessGate, session: SessionRecord, now: number): void {
  const { recheckSeconds, recheckGraceSeconds } = gate.config.access;
  const checkedAt = session.access?.checkedAt ?? now;
  const graceEnd = checkedAt + (recheckSeconds + recheckGraceSeconds) * 1000;
  gate.quietUntil.delete(session.id);
  if (gate.quietUntil.size >= MAX_QUIET) {
    const oldest = gate.quietUntil.keys().next();
    if (!oldest.done) gate.quietUntil.delete(oldest.value);
  }
  gate.quietUntil.set(session.id, Math.min(now + QUIET_AFTER_FAILURE_MS, graceEnd));
}

/** Stores the new decision on the session as it is now (an upstream refresh may have saved it). */
async function saveDecision(deps: AccessGateDeps, decided: SessionRecord): Promise<SessionRecord> {
  for (let attempt = 0; attempt < SAVE_ATTEMPTS; attempt++) {
    const current = await deps.store.getSession(decided.id);
    if (!current) return decided;
    const updated = { ...current.value, access: decided.access };
    if (await deps.store.saveSession(current, updated)) return updated;
  }
  // Another writer kept winning: this request goes on, the next one asks again.
  return decided;
}

async function endSession(deps: AccessGateDeps, session: SessionRecord): Promise<void> {
  const current = await deps.store.getSession(session.id);
  const ended = current && await endSessionAsItIsNow(deps.store, current);
  if (ended) await afterSessionEnded(deps, ended, {});
}
