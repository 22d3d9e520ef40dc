/** Rate-limit counters: one per bucket, subject (client address, caller, session) and fixed window. */

import type { StoreIo } from "./io.ts";
import { rateKey } from "./keys.ts";

/** The rate-limit operations of the store. */
export interface LimitStore {
  /**
   * Counts one request of `ip` in the current fixed window of `bucket`; returns the count
   * including this one (requests over the limit are not counted further).
   */
  countRequest(bucket: string, ip: string, limit: number, windowMs: number): Promise<number>;
  /**
   * Takes back one request `countRequest` counted of `subject` at `countedAt` (epoch ms), in
   * that window and never below zero: a request that turned out not to be one the limit is for.
   * Best effort: under contention it may stay counted, which only errs on the strict side.
   */
  uncountRequest(
    bucket: string,
    subject: string,
    windowMs: number,
    countedAt: number,
  ): Promise<void>;
  /** What `countRequest` has counted of `subject` in the current fixed window of `bucket`. */
  requestsCounted(bucket: string, subject: string, windowMs: number): Promise<number>;
  /**
   * Claims up to `wanted` requests of `subject`'s allowance in the current fixed window of
   * `bucket`, never past `limit` in all; returns how many were granted (0 when none are left).
   */
  claimRequests(
    bucket: string,
    subject: string,
    wanted: number,
    limit: number,
    windowMs: number,
  ): Promise<number>;
}

const RATE_COUNT_ATTEMPTS = 5;
/** Attempts at taking a request back while others are counted (each lost race is one counted). */
const UNCOUNT_ATTEMPTS = 20;

/** Rate-limit counters over the shared KV access. */
export function createLimitStore(io: StoreIo): LimitStore {
  return {
    async requestsCounted(bucket, subject, windowMs) {
      const window = Math.floor(io.clock.now() / windowMs);
      return (await io.read<number>(rateKey(bucket, subject, window)))?.value ?? 0;
    },
    async countRequest(bucket, ip, limit, windowMs) {
      const now = io.clock.now();
      const window = Math.floor(now / windowMs);
      const key = rateKey(bucket, ip, window);
      const expireIn = (window + 1) * windowMs - now + 1000;
      // A lost race means another request was counted (only counting writes this key), so the
      // count read next is higher: at most `limit` conflicts before the answer is "over". A
      // fixed small number of attempts would refuse a parallel burst far below the limit.
      for (let attempt = 0; attempt < limit + RATE_COUNT_ATTEMPTS; attempt++) {
        const current = await io.read<number>(key);
        const count = (current?.value ?? 0) + 1;
        if (count > limit) return count;
        const op = io.atomic()
          .check({ key, versionstamp: current?.versionstamp ?? null })
          .set(key, count, { expireIn });
        if (await io.commit(op)) return count;
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 2));
      }
      return limit + 1;
    },
    async uncountRequest(bucket, subject, windowMs, countedAt) {
      const window = Math.floor(countedAt / windowMs);
      const key = rateKey(bucket, subject, window);
      for (let attempt = 0; attempt < UNCOUNT_ATTEMPTS; attempt++) {
        const expireIn = (window + 1) * windowMs - io.clock.now() + 1000;
        const current = await io.read<number>(key);
        if (!current || current.value <= 0 || expireIn <= 1000) return;
        const op = io.atomic().check(current).set(key, current.value - 1, { expireIn });
        if (await io.commit(op)) return;
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 2));
      }
    },
    async claimRequests(bucket, subject, wanted, limit, windowMs) {
      const now = io.clock.now();
      const window = Math.floor(now / windowMs);
      const key = rateKey(bucket, subject, window);
      const expireIn = (window + 1) * windowMs - now + 1000;
      // As above: a lost race means another claim was granted, so at most `limit` of them.
      for (let attempt = 0; attempt < limit + RATE_COUNT_ATTEMPTS; attempt++) {
        const current = await io.read<number>(key);
        const used = current?.value ?? 0;
        const granted = Math.min(wanted, limit - used);
        if (granted <= 0) return 0;
        const op = io.atomic()
          .check({ key, versionstamp: current?.versionstamp ?? null })
          .set(key, used + granted, { expireIn });
        if (await io.commit(op)) return granted;
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 2));
      }
      return 0;
    },
  };
}
