/**
 * Group read, the companion of group commit (group_commit.ts). Every KV read is a round trip to
 * the SQLite thread whose fixed cost, under load, is about that of reading a few keys more; so
 * reads that arrive while one is in flight are merged into the next `getMany`, up to KV's limit
 * of keys per call. Each caller gets its own entries back, in its own order. A merged read is one
 * consistent snapshot, as each of its parts would have been.
 */

import { type Caller, type Callers, createSerialBatches } from "./serial_batches.ts";

export type ReadMany = (keys: Deno.KvKey[]) => Promise<Deno.KvEntryMaybe<unknown>[]>;

/** A read that is withdrawn while it waits when its caller gives up. */
export type GroupReadMany = (
  keys: Deno.KvKey[],
  caller?: Caller,
) => Promise<Deno.KvEntryMaybe<unknown>[]>;

/** Deno KV reads at most 10 keys per `getMany`. */
const MAX_KEYS = 10;

interface Pending {
  keys: Deno.KvKey[];
  caller?: Caller;
  resolve(entries: Deno.KvEntryMaybe<unknown>[]): void;
  reject(error: unknown): void;
}

/** Returns a `getMany` that reads together with whatever else is waiting. */
export function createGroupRead(readMany: ReadMany, maxKeys = MAX_KEYS): GroupReadMany {
  const enqueue = createSerialBatches(takeGroup, readGroup, CALLERS);

  /** The next reads, in arrival order, up to maxKeys keys (a larger read goes alone). */
  function takeGroup(queue: Pending[]): Pending[] {
    let taken = 1;
    let keys = queue[0].keys.length;
    while (taken < queue.length && keys + queue[taken].keys.length <= maxKeys) {
      keys += queue[taken].keys.length;
      taken++;
    }
    return queue.splice(0, taken);
  }

  async function readGroup(group: Pending[]): Promise<void> {
    if (group.length === 1) return await readAlone(group[0]);
    let entries: Deno.KvEntryMaybe<unknown>[];
    try {
      entries = await readMany(group.flatMap((pending) => pending.keys));
    } catch {
      // Read again one by one, where each caller meets its own error.
      return void await Promise.all(group.map(readAlone));
    }
    let offset = 0;
    for (const pending of group) {
      pending.resolve(entries.slice(offset, offset + pending.keys.length));
      offset += pending.keys.length;
    }
  }

  async function readAlone(pending: Pending): Promise<void> {
    try {
      pending.resolve(await readMany(pending.keys));
    } catch (error) {
      pending.reject(error);
    }
  }

  return (keys, caller) =>
    new Promise((resolve, reject) => {
      enqueue({ keys, caller, resolve, reject });
    });
}

/** Each item's caller, and how a withdrawn one is told. */
const CALLERS: Callers<Pending> = {
  callerOf: (pending) => pending.caller,
  reject: (pending, reason) => pending.reject(reason),
};
