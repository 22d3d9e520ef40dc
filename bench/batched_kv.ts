/**
 * A write-behind Deno.Kv for seeding: the service's store runs on it unchanged, every commit is
 * applied to an in-memory map with the same check/versionstamp semantics (so the store's
 * single-use guards behave as on a real KV), and `flush()` writes the final state of every key
 * touched since the last flush to the real KV in large atomic batches, with the same values and
 * the same absolute expiry (`expireIn`) the store asked for.
 *
 * Why: a file-backed Deno KV fsyncs every commit and commits one at a time, so seeding through
 * the real KV costs 3 fsynced commits per session whatever the concurrency (about 1,000
 * sessions/s here). Batched, what remains is the store's own work (hashing, sealing).
 *
 * Only what the store uses is implemented (get, getMany, atomic check/set/delete/mutate/commit);
 * anything else throws, so a store that starts using more fails loudly instead of seeding
 * something wrong.
 * Keys never seen by this adapter are read as absent: it is meant for a fresh KV file (or a fresh
 * PostgreSQL database), and the seeded keys are random.
 *
 * The target is any database the store runs on (a Deno KV file, or PostgreSQL's backend): the
 * batches go through the store's own seam (backend.ts `commit`), a few at a time, so that
 * PostgreSQL, which commits them in parallel, is not kept waiting on one round trip each.
 */

import { backendOf, type StoreDatabase } from "../src/store/backend.ts";

interface Slot {
  key: Deno.KvKey;
  /** undefined: deleted. */
  value: unknown;
  versionstamp: string | null;
  /** Absolute expiry in epoch ms, or undefined for none. */
  expiresAt?: number;
  /** First written since the last flush: if deleted again, the real KV never needs to know. */
  fresh: boolean;
}

type Mutation =
  | { type: "set"; key: Deno.KvKey; value: unknown; expireIn?: number }
  | { type: "delete"; key: Deno.KvKey };

/** Deno KV's limits are 1000 mutations and 800 KiB per atomic operation; stay well below. */
const BATCH_MUTATIONS = 500;
const BATCH_BYTES = 512 * 1024;
/** Batches in flight at once during a flush. */
const BATCHES_IN_FLIGHT = 4;

function mapKey(key: Deno.KvKey): string {
  for (const part of key) {
    if (typeof part !== "string" && typeof part !== "number") {
      throw new TypeError(`batched KV: unsupported key part ${typeof part}`);
    }
  }
  return JSON.stringify(key);
}

function unsupported(name: string): never {
  throw new Error(`batched KV: ${name} is not supported (seed with BENCH_SEED_MODE=direct)`);
}

export interface BatchedKv {
  /** Pass this to createStore. */
  kv: Deno.Kv;
  /**
   * Writes every key changed since the last flush to the real KV and forgets them; returns how
   * many mutations it wrote. Call it only while no store operation is in flight: keys written
   * before a flush read as absent afterwards.
   */
  flush(): Promise<number>;
}

/** Wraps `target` (a real, fresh KV or database) for batched seeding. */
export function createBatchedKv(target: StoreDatabase): BatchedKv {
  const backend = backendOf(target);
  const slots = new Map<string, Slot>();
  let version = 0n;

  function get<T>(key: Deno.KvKey): Promise<Deno.KvEntryMaybe<T>> {
    const slot = slots.get(mapKey(key));
    if (!slot || slot.value === undefined) {
      return Promise.resolve({ key, value: null, versionstamp: null });
    }
    return Promise.resolve({ key, value: slot.value as T, versionstamp: slot.versionstamp! });
  }

  async function getMany(keys: Deno.KvKey[]): Promise<Deno.KvEntryMaybe<unknown>[]> {
    return await Promise.all(keys.map((key) => get(key)));
  }

  function atomic(): Deno.AtomicOperation {
    const checks: Deno.AtomicCheck[] = [];
    const mutations: Mutation[] = [];
    const op = {
      check(...more: Deno.AtomicCheck[]) {
        checks.push(...more);
        return op;
      },
      set(key: Deno.KvKey, value: unknown, options?: { expireIn?: number }) {
        mutations.push({ type: "set", key, value, expireIn: options?.expireIn });
        return op;
      },
      delete(key: Deno.KvKey) {
        mutations.push({ type: "delete", key });
        return op;
      },
      commit(): Promise<Deno.KvCommitResult | Deno.KvCommitError> {
        for (const check of checks) {
          const slot = slots.get(mapKey(check.key));
          const current = slot && slot.value !== undefined ? slot.versionstamp : null;
          if (current !== check.versionstamp) return Promise.resolve({ ok: false });
        }
        version++;
        const versionstamp = version.toString(16).padStart(20, "0");
        const now = Date.now();
        for (const m of mutations) {
          const k = mapKey(m.key);
          const fresh = slots.get(k)?.fresh ?? m.type === "set";
          if (m.type === "set") {
            slots.set(k, {
              key: m.key,
              value: m.value,
              versionstamp,
              expiresAt: m.expireIn === undefined ? undefined : now + m.expireIn,
              fresh,
            });
          } else {
            slots.set(k, { key: m.key, value: undefined, versionstamp: null, fresh });
          }
        }
        return Promise.resolve({ ok: true, versionstamp });
      },
      mutate(...more: Deno.KvMutation[]) {
        for (const m of more) {
          if (m.type === "set") op.set(m.key, m.value, { expireIn: m.expireIn });
          else if (m.type === "delete") op.delete(m.key);
          else unsupported(`atomic().mutate of type ${m.type}`);
        }
        return op;
      },
      sum: () => unsupported("atomic().sum"),
      min: () => unsupported("atomic().min"),
      max: () => unsupported("atomic().max"),
      enqueue: () => unsupported("atomic().enqueue"),
    };
    return op as unknown as Deno.AtomicOperation;
  }

  const kv = new Proxy({ get, getMany, atomic }, {
    get(target, property) {
      if (property === "get") return target.get;
      if (property === "getMany") return target.getMany;
      if (property === "atomic") return target.atomic;
      // Neither a promise nor a store backend (whose `commit` the store would call instead of
      // `atomic`): only what Deno.Kv has and the store uses.
      if (property === "then" || property === "commit") return undefined;
      return () => unsupported(`kv.${String(property)}`);
    },
  }) as unknown as Deno.Kv;

  async function flush(): Promise<number> {
    let written = 0;
    let batch: Deno.KvMutation[] = [];
    let bytes = 0;
    const inFlight = new Set<Promise<void>>();
    const send = async () => {
      if (batch.length === 0) return;
      const mutations = batch;
      batch = [];
      bytes = 0;
      const sent = backend.commit({ checks: [], mutations }).then((result) => {
        if (!result.ok) throw new Error("batched KV: a flush batch failed to commit");
        written += mutations.length;
      });
      inFlight.add(sent);
      sent.finally(() => inFlight.delete(sent)).catch(() => {/* awaited below */});
      if (inFlight.size >= BATCHES_IN_FLIGHT) await Promise.race(inFlight);
    };
    const now = Date.now();
    const pending = [...slots.values()];
    slots.clear();
    for (const slot of pending) {
      // Created and deleted since the last flush: nothing to write.
      if (slot.value === undefined && slot.fresh) continue;
      const size = JSON.stringify(slot.key).length +
        (slot.value === undefined ? 0 : JSON.stringify(slot.value).length) + 64;
      if (batch.length >= BATCH_MUTATIONS || bytes + size > BATCH_BYTES) await send();
      if (slot.value === undefined) {
        batch.push({ type: "delete", key: slot.key });
      } else {
        const expireIn = slot.expiresAt === undefined
          ? undefined
          : Math.max(1, slot.expiresAt - now);
        batch.push({ type: "set", key: slot.key, value: slot.value, expireIn });
      }
      bytes += size;
    }
    await send();
    await Promise.all(inFlight);
    return written;
  }

  return { kv, flush };
}
