/**
 * The lease that serialises a session's GitLab renewals across every instance: only its holder
 * saves new GitLab tokens into the session (`upstream_refresh.ts`). Ending a session that
 * changed at every attempt to end it as read takes the lease too, so that no renewal can save
 * between its last read and its delete.
 */

import type { Store } from "../store/mod.ts";

/** The lease's kind in the store. */
export const RENEWAL_LEASE = "upstream-refresh";

/** What ending holds the lease for: one read and one delete, released at once. */
const ENDING_LEASE_MS = 30_000;
/**
 * How long ending waits for a renewal in flight (GitLab answering) before it ends the session
 * all the same: the renewal that then saves finds the session gone and revokes its new token.
 */
const RENEWAL_WAIT_MS = 35_000;
const RENEWAL_WAIT_STEP_MS = 25;

/** Runs `work` while no GitLab renewal of session `sessionId` can save; waits for one in flight. */
export async function withRenewalsHeldOff<T>(
  store: Pick<Store, "tryLease">,
  sessionId: string,
  work: () => Promise<T>,
): Promise<T> {
  const deadline = Date.now() + RENEWAL_WAIT_MS;
  let lease = await store.tryLease(RENEWAL_LEASE, sessionId, ENDING_LEASE_MS);
  while (!lease && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, RENEWAL_WAIT_STEP_MS));
    lease = await store.tryLease(RENEWAL_LEASE, sessionId, ENDING_LEASE_MS);
  }
  try {
    return await work();
  } finally {
    // A release the database refuses must not turn the work done (a session deleted, whose
    // GitLab token the caller is to revoke) into an error: the lease expires on its own.
    await lease?.release().catch(() => {});
  }
}
