/**
 * The database deadline's budget (src/store/deadline.ts) on a hand-moved clock, and what the
 * group commit does with writes whose callers gave up (src/store/serial_batches.ts). The
 * end-to-end proof, over HTTP against PostgreSQL and a hung KV, is database_deadline_test.ts.
 */

import assert from "node:assert/strict";
import { createStoreDeadline } from "../src/store/deadline.ts";
import { StoreUnavailableError } from "../src/store/backend.ts";
import { createGroupCommit, type PlannedWrite } from "../src/store/group_commit.ts";
import { Caller } from "../src/store/serial_batches.ts";
import { manualTimers } from "./_timers.ts";

/** An operation the test finishes by hand. */
function manual<T = string>() {
  const { promise, resolve } = Promise.withResolvers<T>();
  return { operation: () => promise, finish: resolve };
}

/** Lets settled promises run their continuations. */
const turn = () => new Promise((resolve) => setTimeout(resolve, 0));

/** Whether `promise` has settled, and how. */
function watch<T>(promise: Promise<T>) {
  const state: { value?: T; error?: unknown; settled: boolean } = { settled: false };
  promise.then(
    (value) => Object.assign(state, { value, settled: true }),
    (error) => Object.assign(state, { error, settled: true }),
  );
  return state;
}

Deno.test("store deadline: a request's operations, one after another, share one budget", async () => {
  const clock = manualTimers();
  const deadline = createStoreDeadline(500, clock.timers);
  const first = manual();
  const second = manual();
  const request = watch(deadline.run(async () => {
    await deadline.bound(first.operation);
    return await deadline.bound(second.operation);
  }));
  clock.advance(300);
  first.finish("read");
  await turn();
  clock.advance(199);
  await turn();
  assert.equal(request.settled, false, "200 ms were left for the second operation");
  clock.advance(1);
  await turn();
  assert.ok(request.error instanceof StoreUnavailableError, String(request.error));
  assert.match(String(request.error), /DATABASE_TIMEOUT_MS \(500 ms\)/);
});

Deno.test("store deadline: overlapping operations count once; time between them is not counted", async () => {
  const clock = manualTimers();
  const deadline = createStoreDeadline(500, clock.timers);
  const a = manual();
  const b = manual();
  const later = manual();
  const request = watch(deadline.run(async () => {
    await Promise.all([deadline.bound(a.operation), deadline.bound(b.operation)]);
    // Waiting for GitLab (or the MCP server) spends none of the database's budget.
    await new Promise((resolve) => clock.timers.setTimeout(() => resolve(null), 10_000));
    return await deadline.bound(later.operation);
  }));
  clock.advance(300);
  a.finish("a");
  b.finish("b");
  await turn();
  clock.advance(10_000);
  await turn();
  clock.advance(199);
  later.finish("answered");
  await turn();
  assert.deepEqual(request, { value: "answered", settled: true });
});

Deno.test("store deadline: a spent budget answers at once; an operation outside a request, or after its answer, has its own", async () => {
  const clock = manualTimers();
  const deadline = createStoreDeadline(500, clock.timers);
  const hung = manual();
  let afterAnswer: (() => Promise<string>) | undefined;
  const request = watch(deadline.run(async () => {
    try {
      await deadline.bound(hung.operation);
    } catch {
      // Spent: the next operation does not even start.
      let started = false;
      await deadline.bound(() => {
        started = true;
        return Promise.resolve();
      }).catch(() => {});
      assert.equal(started, false);
    }
    afterAnswer = () => deadline.bound(() => Promise.resolve("later"));
    return "answered";
  }));
  clock.advance(500);
  await turn();
  assert.equal(request.value, "answered");
  assert.equal(await afterAnswer?.(), "later", "the stream's operation after the answer runs");
  const alone = manual();
  const outside = watch(deadline.bound(alone.operation));
  clock.advance(499);
  alone.finish("alone");
  await turn();
  assert.deepEqual(outside, { value: "alone", settled: true });
});

Deno.test("store deadline: the operations in flight share one timer, each expiring at its own limit, and none is left when they end", async () => {
  const clock = manualTimers();
  const deadline = createStoreDeadline(500, clock.timers);
  // A request that spends 300 ms of its budget on a first operation, then waits (not counted).
  const first = manual();
  const second = manual();
  const gate = Promise.withResolvers<void>();
  const spending = watch(deadline.run(async () => {
    await deadline.bound(first.operation);
    await gate.promise;
    return await deadline.bound(second.operation);
  }));
  clock.advance(300);
  first.finish("read");
  await turn();
  assert.equal(clock.pending.size, 0, "no operation in flight, no timer");
  const operations = Array.from({ length: 20 }, () => manual());
  const requests = operations.map((op) => watch(deadline.run(() => deadline.bound(op.operation))));
  assert.equal(clock.pending.size, 1, "twenty operations, one timer");
  // Its second operation has 200 ms left: its limit comes before the others'.
  gate.resolve();
  await turn();
  assert.equal(clock.pending.size, 1);
  for (const [i, op] of operations.entries()) if (i % 2 === 0) op.finish("done");
  await turn();
  clock.advance(199);
  await turn();
  assert.equal(spending.settled, false);
  clock.advance(1);
  await turn();
  assert.ok(spending.error instanceof StoreUnavailableError, "expired with its 200 ms, not 500");
  assert.equal(requests.filter((r) => r.settled).length, 10, "the others have 300 ms left");
  assert.equal(clock.pending.size, 1);
  clock.advance(299);
  await turn();
  assert.equal(requests.filter((r) => r.settled).length, 10);
  operations[1].finish("done");
  await turn();
  clock.advance(1);
  await turn();
  assert.equal(requests.filter((r) => r.error instanceof StoreUnavailableError).length, 9);
  assert.equal(requests[1].value, "done");
  assert.equal(clock.pending.size, 0, "no timer holds an idle process");
});

const write = (key: string): PlannedWrite => ({
  checks: [],
  mutations: [{ type: "set", key: [key], value: 1 }],
});

Deno.test("group commit: a write whose caller gave up while it waited is never sent; a hung commit whose callers all gave up does not hold the next", async () => {
  const sent: string[][] = [];
  const hang = Promise.withResolvers<Deno.KvCommitResult>();
  const submit = createGroupCommit((planned) => {
    const keys = planned.mutations.map(({ key }) => String(key[0]));
    sent.push(keys);
    return keys.includes("hung") ? hang.promise : Promise.resolve({ ok: true, versionstamp: "1" });
  });
  const hungCaller = new Caller();
  const hung = watch(submit(write("hung"), hungCaller));
  await turn();
  const withdrawnCaller = new Caller();
  const withdrawn = watch(submit(write("withdrawn"), withdrawnCaller));
  const reason = new StoreUnavailableError("gave up");
  withdrawnCaller.giveUp(reason);
  await turn();
  assert.deepEqual(sent, [["hung"]], "nothing else is sent while the first commit hangs");
  hungCaller.giveUp(reason);
  const next = watch(submit(write("next"), new Caller()));
  await turn();
  await turn();
  assert.deepEqual(sent, [["hung"], ["next"]], "the withdrawn write was never sent");
  assert.equal(withdrawn.error, reason);
  assert.deepEqual(next.value, { ok: true, versionstamp: "1" });
  assert.equal(hung.settled, false, "the abandoned commit settles when its database answers");
  hang.resolve({ ok: true, versionstamp: "0" });
});
