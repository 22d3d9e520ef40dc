/** Leases: a short exclusive claim on some work, across every instance sharing the KV. */

import type { StoreIo, Versioned } from "./io.ts";
import { leaseKey } from "./keys.ts";
import type { FlowRecord } from "./records.ts";

/** A claim held until released or expired. */
export interface Lease {
  release(): Promise<void>;
}

/** The lease operations of the store. */
export interface LeaseStore {
  /** Claims `kind`/`id` for `ttlMs` unless someone holds it; null when held. */
  tryLease(kind: string, id: string, ttlMs: number): Promise<Lease | null>;
  /** tryLease for the upstream work on one device flow. */
  tryLeaseFlow(flow: Versioned<FlowRecord>, ttlMs: number): Promise<Lease | null>;
}

/** Leases over the shared KV access. */
export function createLeaseStore(io: StoreIo): LeaseStore {
  async function tryLease(kind: string, id: string, ttlMs: number): Promise<Lease | null> {
    const key = leaseKey(kind, id);
    const current = await io.read<{ expiresAt: number }>(key);
    if (current && io.isLive(current.value)) return null;
    const expiresAt = io.clock.now() + ttlMs;
    const result = await io.atomic()
      .check({ key, versionstamp: current?.versionstamp ?? null })
      .set(key, { expiresAt }, { expireIn: ttlMs })
      .commit();
    if (!result.ok) return null;
    const held = { key, versionstamp: result.versionstamp };
    return {
      async release() {
        await io.commit(io.atomic().check(held).delete(key));
      },
    };
  }

  return {
    tryLease,
    // The flow key's second part is the flow state's hash: the lease names no secret.
    tryLeaseFlow: (flow, ttlMs) => tryLease("flow", String(flow.key[1]), ttlMs),
  };
}
