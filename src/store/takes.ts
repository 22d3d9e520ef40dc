/**
 * A sweep's takes: each record taken (deleted in a checked commit) by itself. One take the
 * database fails must not lose the others: their records are gone, and what they held (a GitLab
 * token to revoke) is answered all the same; the one that failed is left for the next sweep.
 */

/** What one sweep's takes got, and the errors of those that failed. */
export interface Taken<T> {
  taken: T[];
  errors: unknown[];
}

/** Runs `take` for every entry at once; null when another sweep (or a change) got there first. */
export async function takeEach<E, T>(
  entries: readonly E[],
  take: (entry: E) => Promise<T | null>,
): Promise<Taken<T>> {
  const settled = await Promise.allSettled(entries.map(take));
  const taken: T[] = [];
  const errors: unknown[] = [];
  for (const one of settled) {
    if (one.status === "rejected") errors.push(one.reason);
    else if (one.value !== null) taken.push(one.value);
  }
  return { taken, errors };
}
