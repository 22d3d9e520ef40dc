/**
 * The few operations the store asks of its database, so that Deno KV and PostgreSQL
 * (postgres/backend.ts) are interchangeable under io.ts. A `Deno.Kv` is accepted as it is and
 * adapted here; every other backend implements `KvBackend` with Deno KV's semantics: keys are
 * Deno KV key tuples in Deno KV's order, versionstamps are strings that grow with every commit,
 * and a commit whose checks all hold applies all of its mutations or none.
 */

import type { CommitOutcome, PlannedWrite } from "./group_commit.ts";

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
   * Whether the database takes writes now, found without writing; absent where it has no such
   * state to ask for (Deno KV: its file, or KV Connect's service, is not left on a standby).
   */
  writable?(): Promise<boolean>;
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

function denoKvBackend(kv: Deno.Kv): KvBackend {
  return {
    getMany: (keys) => kv.getMany(keys as Deno.KvKey[]),
    list: (selector, options) => kv.list(selector, options),
    commit: ({ checks, mutations }) => kv.atomic().check(...checks).mutate(...mutations).commit(),
    close: () => kv.close(),
  };
}
