import assert from "node:assert/strict";
import { createDeadlines } from "../src/gateway/deadlines.ts";
import { manualTimers } from "./_timers.ts";

Deno.test("deadlines: waits started within one tick share one timer", () => {
  const clock = manualTimers();
  const deadlines = createDeadlines(30_000, clock.timers);
  const waits = Array.from({ length: 100 }, () => deadlines.start());
  assert.equal(clock.pending.size, 1, "one timer for the whole tick (100 ms at a 30 s limit)");
  clock.advance(150);
  deadlines.start();
  assert.equal(clock.pending.size, 2, "a wait in a later tick gets its own");
  for (const wait of waits) wait.done();
  assert.equal(clock.pending.size, 1, "the tick's timer goes with its last wait");
});

Deno.test("deadlines: a wait is aborted at its limit plus at most one tick, with a TimeoutError", () => {
  const clock = manualTimers();
  const deadlines = createDeadlines(150, clock.timers); // a 15 ms tick
  const wait = deadlines.start();
  clock.advance(149);
  assert.equal(wait.signal.aborted, false, "not before the limit");
  clock.advance(15);
  assert.equal(wait.signal.aborted, true, "by the limit plus one tick");
  assert.equal((wait.signal.reason as DOMException).name, "TimeoutError");
  wait.done();
});

Deno.test("deadlines: a wait that ended is never aborted, and others in its tick still are", () => {
  const clock = manualTimers();
  const deadlines = createDeadlines(1000, clock.timers);
  const ended = deadlines.start();
  const running = deadlines.start();
  ended.done();
  ended.done();
  clock.advance(1100);
  assert.equal(ended.signal.aborted, false);
  assert.equal(running.signal.aborted, true);
  running.done();
  assert.equal(clock.pending.size, 0);
});

Deno.test("deadlines: the real timers abort a wait, and leave none behind once it ended", async () => {
  const deadlines = createDeadlines(20);
  const aborted = deadlines.start();
  await new Promise((resolve) => aborted.signal.addEventListener("abort", resolve));
  aborted.done();
  deadlines.start().done(); // the sanitizer fails this test if its timer stayed
});

Deno.test("deadlines: whenExpired runs at the limit, at once when it has passed, never after done", () => {
  const clock = manualTimers();
  const deadlines = createDeadlines(1000, clock.timers);
  const calls: string[] = [];
  const expiring = deadlines.start();
  expiring.whenExpired(() => calls.push("replaced"));
  expiring.whenExpired(() => calls.push("expiring"));
  const ended = deadlines.start();
  ended.whenExpired(() => calls.push("ended"));
  ended.done();
  clock.advance(999);
  assert.deepEqual([...calls], [], "not before the limit");
  clock.advance(200);
  assert.deepEqual([...calls], ["expiring"], "the last callback, once; none for a wait that ended");
  expiring.whenExpired(() => calls.push("late"));
  assert.deepEqual(
    [...calls],
    ["expiring", "late"],
    "a wait past its limit runs a new callback at once",
  );
  ended.whenExpired(() => calls.push("after done"));
  assert.deepEqual([...calls], ["expiring", "late"]);
  expiring.done();
});
