/**
 * The library's resource guard (mod.ts) over a test app's store, simulated GitLab and clock,
 * for the tests that check what a Deno MCP server using it gets.
 */

import { createResourceGuard, type ResourceGuardOptions } from "../mod.ts";
import type { StoreDatabase } from "../src/store/mod.ts";
import { TEST_BASE, TEST_SECRET, type TestApp } from "./_helpers.ts";

/** The guard of `t`'s service (its secret, issuer, store, GitLab and clock), `options` over it. */
export function testGuard<D extends StoreDatabase>(
  t: TestApp<D>,
  options: Partial<ResourceGuardOptions> = {},
) {
  return createResourceGuard({
    kv: t.kv,
    jwtSecret: TEST_SECRET,
    issuer: TEST_BASE,
    upstream: t.upstream,
    clock: t.clock,
    ...options,
  });
}
