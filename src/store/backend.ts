/**
 * The few operations the store asks of its database, so that Deno KV and PostgreSQL
 * (postgres/backend.ts) are interchangeable under io.ts. A `Deno.Kv` is accepted as it is and
 * adapted here; every other backend implements `KvBackend` with Deno KV's semantics: keys are
 * Deno KV key tuples in Deno KV's order, versionstamps are strings that grow with every commit,
 * and a commit whose checks all hold applies all of its mutations or none.
 */

import type { CommitOutcome, PlannedWrite } from "./group_commit.ts";
import { retryLocked } from "./locked_retry.ts";

/** What io.ts needs of a database. */
export interface KvBackend {
  /** The entries at `keys` (absent or expired: versionstamp null), read as one snapshot. */
  getMany(keys: readonly Deno.KvKey[]): Promise<Deno.KvEntryMaybe<unknown>[]>;
  /** The live entries in `selector`'s range, in key order. */
  list<T>(
    selector: Deno.KvListSelector,
    options?: { limit?: number; batchSize?: number },
  ): AsyncIterable<Deno.KvEntry<T>>;
  /** Applies `write` atomically when every check holds; `{ ok: false }` when one does not. */
  commit(write: PlannedWrite): Promise<CommitOutcome>;
  /**
   * Whether the database takes writes now; absent where it cannot say (true is assumed).
   * PostgreSQL asks without writing (a standby); Deno KV, only while its last commit failed for
   * its storage (a full disk), sets and deletes `probe` in one commit, until one succeeds.
   */
  writable?(probe: Deno.KvKey): Promise<boolean>;
  /**
   * Whether the file the database was opened at is no longer at its path (deleted, or another
   * file moved there); absent where there is no such file. The process goes on with the file it
   * holds open: what it writes is lost to the next start and unseen by the operator's CLI.
   */
  replaced?(): Promise<boolean>;
  /** Releases connections and timers; the returned promise settles when they are gone. */
  close(): void | Promise<void>;
}

/** What the store runs on: an open Deno KV, or another backend. */
export type StoreDatabase = Deno.Kv | KvBackend;

/**
 * The database cannot be reached (or did not answer in time): the request may succeed later,
 * so it is answered 503 with `Retry-After` rather than 500.
 */
export class StoreUnavailableError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StoreUnavailableError";
  }
}

/** `database` as a KvBackend: a Deno KV adapted, any other backend as it is. */
export function backendOf(database: StoreDatabase): KvBackend {
  return isBackend(database) ? database : denoKvBackend(database);
}

function isBackend(database: StoreDatabase): database is KvBackend {
  return typeof (database as Partial<KvBackend>).commit === "function";
}

/**
 * Deno KV as a KvBackend. An error of its storage (see STORAGE_FAILURE) is StoreUnavailableError:
 * answered 503 with `Retry-After`, not 500, since freeing the disk or fixing the mount ends it.
 * `replaced` tells whether its file left its path (kv_open.ts), for a file.
 */
export function denoKvBackend(kv: Deno.Kv, replaced?: () => Promise<boolean>): KvBackend {
  /** The last commit failed for the storage, and no commit succeeded since. */
  let refusing = false;
  const commit = async ({ checks, mutations }: PlannedWrite) => {
    try {
      const outcome = await unavailableOnStorageFailure(() =>
        kv.atomic().check(...checks).mutate(...mutations).commit()
      );
      refusing = false;
      return outcome;
    } catch (error) {
      if (error instanceof StoreUnavailableError) refusing = true;
      throw error;
    }
  };
  return {
    getMany: (keys) => unavailableOnStorageFailure(() => kv.getMany(keys as Deno.KvKey[])),
    list: (selector, options) => unavailableListing(kv.list(selector, options)),
    commit,
    async writable(probe) {
      if (!refusing) return true;
      try {
        await retryLocked(() => commit(leavingNothing(probe)));
        return true;
      } catch (error) {
        if (error instanceof StoreUnavailableError) return false;
        throw error;
      }
    },
    replaced,
    close: () => kv.close(),
  };
}

/**
 * A write that leaves nothing behind: `key` set and deleted. It changes pages, so SQLite must
 * append to its file (an empty commit sometimes does not).
 */
function leavingNothing(key: Deno.KvKey): PlannedWrite {
  return {
    checks: [],
    mutations: [{ type: "set", key, value: { expiresAt: 0 } }, { type: "delete", key }],
  };
}

/**
 * SQLite's messages, as Deno KV passes them on, for a store file it cannot write or read now:
 * SQLITE_FULL (the disk or a quota is full), SQLITE_IOERR (the disk or its mount fails, the file
 * system went read-only under the file, a file grew past RLIMIT_FSIZE), SQLITE_READONLY (a file
 * this process may only read), SQLITE_CANTOPEN (its journal cannot be created).
 */
const STORAGE_FAILURE =
  /database or disk is full|disk I\/O error|attempt to write a readonly database|unable to open database file/i;

async function unavailableOnStorageFailure<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (!STORAGE_FAILURE.test(message)) throw error;
    throw new StoreUnavailableError(`KV storage unavailable: ${message}`, { cause: error });
  }
}

/** `entries`, each page read with a storage failure answered as unavailable. */
async function* unavailableListing<T>(entries: AsyncIterator<T>): AsyncIterable<T> {
  try {
    while (true) {
      const next = await unavailableOnStorageFailure(() => entries.next());
      if (next.done) return;
      yield next.value;
    }
  } finally {
    await entries.return?.();
  }
}
