/**
 * RFC 8628 §3.5 `slow_down`: once GitLab asks a flow to slow down, that flow's interval grows by
 * 5 seconds and GitLab is not polled for it again before the new interval has passed, however
 * often the page polls us. And however many polls of one flow arrive at once, GitLab sees one.
 */

import assert from "node:assert/strict";
import {
  countRecords,
  poll,
  pollCompletesAndExchanges,
  pollOk as pollBody,
  slowPoll,
  startFlow,
  type TestApp,
  withApp,
} from "./_helpers.ts";

async function storedFlow(t: TestApp, flowState: string) {
  const flow = await t.store.getFlow(flowState);
  assert.ok(flow, "the flow is stored");
  return flow.value;
}

Deno.test("slow_down: the flow is not polled upstream again for interval + 5 s, then is", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    assert.equal((await storedFlow(t, flowState)).intervalSeconds, 5);
    t.upstream.polls.push({ kind: "slow_down" });
    const slowedAt = t.clock.now();
    assert.deepEqual(await pollBody(t, flowState), { status: "pending" });
    assert.equal(t.upstream.calls.poll, 1);

    const flow = await storedFlow(t, flowState);
    assert.equal(flow.intervalSeconds, 10, "the stored interval grew by 5");
    assert.equal(flow.nextPollAt, slowedAt + 10_000);

    // The page keeps polling every second; GitLab hears nothing for 10 s.
    t.upstream.approve();
    for (let second = 1; second < 10; second++) {
      t.clock.current = slowedAt + second * 1000;
      assert.deepEqual(await pollBody(t, flowState), { status: "pending" }, `at ${second} s`);
      assert.equal(t.upstream.calls.poll, 1, `GitLab not polled at ${second} s`);
    }
    t.clock.current = slowedAt + 9_999;
    assert.deepEqual(await pollBody(t, flowState), { status: "pending" });
    assert.equal(t.upstream.calls.poll, 1);

    // Once the interval has passed it is polled again, and completes.
    t.clock.current = slowedAt + 10_000;
    await pollCompletesAndExchanges(t, flowState);
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("slow_down: every slow_down adds another 5 s", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push({ kind: "slow_down" }, { kind: "slow_down" }, { kind: "pending" });

    await pollBody(t, flowState);
    assert.equal((await storedFlow(t, flowState)).intervalSeconds, 10);

    t.clock.advance(10_000);
    await pollBody(t, flowState);
    assert.equal(t.upstream.calls.poll, 2);
    const flow = await storedFlow(t, flowState);
    assert.equal(flow.intervalSeconds, 15);
    assert.equal(flow.nextPollAt, t.clock.now() + 15_000);

    t.clock.advance(14_999);
    await pollBody(t, flowState);
    assert.equal(t.upstream.calls.poll, 2, "not before 15 s");
    t.clock.advance(1);
    await pollBody(t, flowState);
    assert.equal(t.upstream.calls.poll, 3);
    // A plain `pending` keeps the interval it has.
    assert.equal((await storedFlow(t, flowState)).intervalSeconds, 15);
  }));

Deno.test("slow_down: only the flow GitLab slowed down waits", () =>
  withApp(async (t) => {
    const slowed = await startFlow(t);
    const other = await startFlow(t, { state: "other" });
    t.upstream.polls.push({ kind: "slow_down" });
    await pollBody(t, slowed);
    assert.equal(t.upstream.calls.poll, 1);

    t.clock.advance(1000);
    await pollBody(t, other);
    assert.equal(t.upstream.calls.poll, 2, "the other flow is polled as usual");
    assert.equal((await storedFlow(t, other)).intervalSeconds, 5);
    await pollBody(t, slowed);
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("slow_down: a flow waiting out its interval still expires on time", () =>
  withApp(async (t) => {
    t.upstream.device = { ...t.upstream.device, expiresInSeconds: 8 };
    const flowState = await startFlow(t);
    t.upstream.polls.push({ kind: "slow_down" });
    await pollBody(t, flowState);
    t.clock.advance(8_001);
    const response = await poll(t, flowState);
    assert.equal(response.status, 400);
    assert.deepEqual(await response.json(), { status: "expired", error: "Device code expired" });
    assert.equal(t.upstream.calls.poll, 1);
    assert.equal(await t.store.getFlow(flowState), null);
  }));

Deno.test("slow_down: 10 concurrent polls of one flow share one upstream call", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push(slowPoll(50, { kind: "pending" }));
    const bodies = await Promise.all(
      Array.from({ length: 10 }, () => pollBody(t, flowState)),
    );
    assert.deepEqual(bodies, bodies.map(() => ({ status: "pending" })));
    assert.equal(t.upstream.calls.poll, 1);
    assert.equal(await countRecords(t.kv, "lease"), 0);

    // The lease is gone: once the interval has passed, the next poll asks GitLab again.
    t.clock.advance(5_000);
    await pollBody(t, flowState);
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("slow_down: 10 concurrent polls while GitLab answers slow_down → one call, one back-off", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push(slowPoll(50, { kind: "slow_down" }));
    const bodies = await Promise.all(
      Array.from({ length: 10 }, () => pollBody(t, flowState)),
    );
    assert.deepEqual(bodies, bodies.map(() => ({ status: "pending" })));
    assert.equal(t.upstream.calls.poll, 1);
    assert.equal((await storedFlow(t, flowState)).intervalSeconds, 10, "grown once, not ten times");

    // A burst during the back-off reaches GitLab not at all.
    await Promise.all(Array.from({ length: 10 }, () => pollBody(t, flowState)));
    assert.equal(t.upstream.calls.poll, 1);
  }));

Deno.test("slow_down: 10 concurrent polls of an approved flow → one upstream call, one complete", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push(
      slowPoll(50, {
        kind: "token",
        tokens: { accessToken: "gl-access-0", refreshToken: "gl-refresh-0", expiresInSeconds: 60 },
      }),
    );
    const responses = await Promise.all(Array.from({ length: 10 }, () => poll(t, flowState)));
    const bodies = await Promise.all(responses.map((response) => response.json()));
    assert.equal(bodies.filter((body) => body.status === "complete").length, 1);
    assert.equal(t.upstream.calls.poll, 1);
    assert.equal(t.upstream.calls.user, 1);
  }));
