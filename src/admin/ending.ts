/**
 * How the operator's commands end sessions (`sessions revoke`, `clients delete`): every GitLab
 * token opened before anything is deleted, then each session deleted as the service's /revoke
 * deletes one, only if unchanged since it was read (a renewal saved since is read again and its
 * new GitLab token revoked, not left live at GitLab; one changed at every attempt is ended all the
 * same, renewals held off), and only what this command deleted counted.
 */

import type { LogFields, Logger } from "../logger.ts";
import { revokeOpenedUpstreamTokens } from "../session/end.ts";
import { endSessionAsItIsNow } from "../session/life.ts";
import type { Store, Versioned } from "../store/mod.ts";
import type { SessionRecord, UpstreamTokenPair } from "../store/records.ts";
import type { Upstream } from "../upstream/types.ts";
import { AdminRefusal } from "./refusal.ts";

/** Upstream revocations in flight at once: a courtesy to the GitLab instance. */
const REVOCATION_CONCURRENCY = 8;
/** Deletes in flight at once: enough for the group commit to fill each commit. */
const DELETE_CONCURRENCY = 256;

/** What ending sessions uses of the CLI's (AdminDeps). */
interface EndingDeps {
  store: Store;
  logger: Logger;
}

/** What revoking a session's GitLab tokens takes; undefined when the operator keeps them. */
export type Revoker = Upstream | undefined;

/** A session about to end, as read, and its GitLab tokens when they are to be revoked. */
export interface Ending {
  session: Versioned<SessionRecord>;
  tokens?: UpstreamTokenPair;
}

/**
 * Opens every session's GitLab tokens before anything is deleted: a session whose tokens this
 * environment cannot open (another ENCRYPTION_KEY than the service's) would otherwise end with
 * its GitLab token still valid. Throws AdminRefusal unless `refuse` is false.
 */
export async function openAll(
  sessions: Versioned<SessionRecord>[],
  revoker: Revoker,
  deps: EndingDeps,
  { refuse } = { refuse: true },
): Promise<Ending[]> {
  if (!revoker) return sessions.map((session) => ({ session }));
  const ending = await Promise.all(sessions.map(async (session) => ({
    session,
    tokens: await deps.store.openUpstreamTokens(session.value) ?? undefined,
  })));
  const unopened = ending.filter((one) => !one.tokens).length;
  if (unopened > 0 && refuse) {
    throw new AdminRefusal(
      `${unopened} of ${sessions.length} session(s) hold GitLab tokens sealed under a key this ` +
        "environment does not have; nothing was ended. Set the service's ENCRYPTION_KEY (or " +
        "its JWT_SECRET, and JWT_SECRET_PREVIOUS during a rotation) and ENCRYPTION_KEY_PREVIOUS " +
        "if it has one, or add " +
        "--keep-gitlab-tokens to end the sessions and leave their GitLab tokens valid.",
    );
  }
  return ending;
}

/** A session this command deleted, and the GitLab tokens it held when it was deleted. */
interface Ended {
  sessionId: string;
  tokens?: UpstreamTokenPair;
}

/**
 * Deletes the sessions first (their tokens stop working at once), then revokes the GitLab
 * tokens of those this command deleted, best effort (a failure is logged and counted, never
 * retried), and logs the operator action: `named` (the action and what it named), the sessions
 * ended, the revocations. A session another command or a refused renewal ended meanwhile is
 * neither counted nor revoked here: whoever deleted it does that.
 */
export async function endSessions(
  ending: Ending[],
  revoker: Revoker,
  named: LogFields & { action: string },
  deps: EndingDeps,
): Promise<void> {
  const ended: Ended[] = [];
  await inParallel(ending, DELETE_CONCURRENCY, async (one) => {
    const deleted = await endAsItIsNow(one, revoker, deps);
    if (deleted) ended.push(deleted);
  });
  await countForMetrics(ended.length, named, deps);
  let gitlabTokensRevoked = 0;
  if (revoker) {
    await inParallel(ended, REVOCATION_CONCURRENCY, async ({ sessionId, tokens }) => {
      const upstreamDeps = { ...deps, upstream: revoker };
      if (tokens && await revokeOpenedUpstreamTokens(upstreamDeps, tokens, { sessionId })) {
        gitlabTokensRevoked++;
      }
    });
  } else if (ended.length > 0) {
    deps.logger.warn("--keep-gitlab-tokens: the GitLab tokens of these sessions stay valid", named);
  }
  deps.logger.info("operator action", {
    ...named,
    sessions: ended.length,
    gitlabTokensRevoked,
    gitlabRevocationsFailed: revoker ? ended.length - gitlabTokensRevoked : 0,
    ...(revoker ? {} : { gitlabTokensKept: ended.length }),
  });
}

/**
 * Deletes the session if it is as read, else as it is now (read again, as the operator reads
 * it: also when its tokens cannot be opened); null when it is gone. The tokens are those of the
 * record deleted: opened again when a renewal changed them since `openAll`.
 */
async function endAsItIsNow(
  { session, tokens }: Ending,
  revoker: Revoker,
  { store }: EndingDeps,
): Promise<Ended | null> {
  const deleted = await endSessionAsItIsNow(store, session, {
    reread: (id) => store.readSession(id),
  });
  if (!deleted) return null;
  const sessionId = deleted.id;
  if (!revoker) return { sessionId };
  if (deleted.sealedUpstreamTokens === session.value.sealedUpstreamTokens) {
    return { sessionId, tokens };
  }
  return { sessionId, tokens: await store.openUpstreamTokens(deleted) ?? undefined };
}

/** Runs `work` on every item, at most `concurrency` at once. */
async function inParallel<T>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
}

/**
 * Leaves the count of sessions ended for the service's `revocations_total{outcome="operator"}`;
 * the sessions are ended whether or not it could be written.
 */
async function countForMetrics(
  sessions: number,
  named: LogFields & { action: string },
  deps: EndingDeps,
): Promise<void> {
  try {
    await deps.store.countOperatorRevocations(sessions);
  } catch (error) {
    deps.logger.warn("the sessions ended are not counted in the service's metrics", {
      ...named,
      error: error instanceof Error ? error.message : String(error),
    });
  }
}
