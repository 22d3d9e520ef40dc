/** A store backend whose database can be taken down and brought back by a test. */

import { type KvBackend, StoreUnavailableError } from "../src/store/backend.ts";

/** A Deno KV that answers StoreUnavailableError while `unavailable` (a KV Connect outage). */
export function switchableKv(kv: Deno.Kv): KvBackend & { unavailable: boolean } {
  const backend = {
    unavailable: false,
    check() {
      if (backend.unavailable) throw new StoreUnavailableError("KV unavailable (test)");
    },
    getMany(keys: readonly Deno.KvKey[]) {
      backend.check();
      return kv.getMany(keys as Deno.KvKey[]);
    },
    list<T>(selector: Deno.KvListSelector, options?: { limit?: number; batchSize?: number }) {
      backend.check();
      return kv.list<T>(selector, options);
    },
    commit({ checks, mutations }: Parameters<KvBackend["commit"]>[0]) {
      backend.check();
      return kv.atomic().check(...checks).mutate(...mutations).commit();
    },
    close: () => kv.close(),
  };
  return backend;
}
