import assert from "node:assert/strict";
import { retryLocked } from "../src/store/locked_retry.ts";

/** An operation that fails with `error` `times` times, then answers "done". */
function failing(times: number, error: Error) {
  let calls = 0;
  const operation = () => {
    calls++;
    return calls <= times ? Promise.reject(error) : Promise.resolve("done");
  };
  return { operation, calls: () => calls };
}

Deno.test("retryLocked: 'database is locked' is tried again until it passes", async () => {
  const op = failing(20, new TypeError("database is locked"));
  assert.equal(await retryLocked(op.operation), "done");
  assert.equal(op.calls(), 21);
});

Deno.test("retryLocked: every pause between tries is short", async () => {
  // The uncapped doubling this replaces slept up to 5 × 2^7 ms on the eighth try alone.
  const pauses: number[] = [];
  const op = failing(40, new TypeError("database is locked"));
  await retryLocked(op.operation, 60_000, (ms) => {
    pauses.push(ms);
    return Promise.resolve();
  });
  assert.equal(pauses.length, 40);
  assert.ok(pauses.every((ms) => ms > 0 && ms <= 4.5), pauses.join(", "));
});

Deno.test("retryLocked: any other error is the caller's at once", async () => {
  const op = failing(1, new TypeError("disk I/O error"));
  await assert.rejects(retryLocked(op.operation), /disk I\/O error/);
  assert.equal(op.calls(), 1);
});

Deno.test("retryLocked: a lock that outlasts the budget is the caller's", async () => {
  const op = failing(Infinity, new TypeError("database is locked"));
  await assert.rejects(retryLocked(op.operation, 30), /database is locked/);
  assert.ok(op.calls() > 1);
});
