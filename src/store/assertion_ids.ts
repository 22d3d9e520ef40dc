/**
 * Single-use JWT assertions: the `jti` of every assertion accepted is kept until the assertion
 * could no longer be accepted anyway (its `exp` plus the leeway), so the same assertion presented
 * again, even at the same moment on another instance, is refused. One atomic commit that
 * requires the key to be absent decides between concurrent presentations, in Deno KV and
 * PostgreSQL alike.
 *
 * @see RFC 7523 §3 (item 7), RFC 7519 §4.1.7
 */

import type { StoreIo } from "./io.ts";
import { assertionIdKey } from "./keys.ts";

/** The assertion-id operations of the store. */
export interface AssertionIdStore {
  /**
   * Records that the assertion `jti` from `issuer` was used, to be remembered until `keepUntil`
   * (epoch ms); false when it was used before (and is still remembered).
   */
  spendAssertionId(issuer: string, jti: string, keepUntil: number): Promise<boolean>;
}

/** Assertion ids over the shared KV access. */
export function createAssertionIdStore(io: StoreIo): AssertionIdStore {
  return {
    async spendAssertionId(issuer, jti, keepUntil) {
      const key = assertionIdKey(issuer, jti);
      const stored = await io.read<{ expiresAt: number }>(key);
      // Deno deletes an expired entry only some time later: a remembered one refuses, a
      // forgotten one (past keepUntil, so its assertion has expired) is replaced under check.
      if (stored && io.isLive(stored.value)) return false;
      const op = io.atomic()
        .check({ key, versionstamp: stored?.versionstamp ?? null })
        .set(key, { expiresAt: keepUntil }, { expireIn: io.ttlUntil(keepUntil) });
      return await io.commit(op);
    },
  };
}
