/**
 * Poll economy (not in the spec; docs/spec-choices.md "Where the spec is silent"): GitLab is polled
 * for a flow at most once per `interval` after its last answer however often the page polls us,
 * across instances sharing the KV; a GitLab 429 (or `RateLimit-Remaining: 0`) pauses every poll of
 * every flow on every instance until its `Retry-After` / `RateLimit-Reset`. Pages keep hearing the
 * spec's `{status: "pending"}` meanwhile. The clock is injected: nothing sleeps.
 */

import assert from "node:assert/strict";
import { recordsOf } from "../src/store/keys.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  FakeClock,
  FakeUpstream,
  makeTestApp,
  poll,
  pollCompletesAndExchanges,
  pollOk as pollBody,
  slowPoll,
  startFlow,
  type TestApp,
  withApp,
} from "./_helpers.ts";

async function assertPending(t: TestApp, flowState: string, what: string): Promise<void> {
  assert.deepEqual(await pollBody(t, flowState), { status: "pending" }, what);
}

/** Two instances of the service on one KV file, with one clock and one GitLab. */
async function withTwoInstances(fn: (a: TestApp, b: TestApp) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "poll-economy-" });
  const shared = {
    kvPath: `${dir}/kv.sqlite`,
    clock: new FakeClock(),
    upstream: new FakeUpstream(),
  };
  const a = await makeTestApp(shared);
  const b = await makeTestApp(shared);
  try {
    await fn(a, b);
  } finally {
    a.close();
    b.close();
    await Deno.remove(dir, { recursive: true });
  }
}

for (const interval of [5, 2]) {
  Deno.test(`poll economy: a page polling every second for 20 s (interval ${interval}) → GitLab polled at most 20 / interval + 1 times`, () =>
    withApp(async (t) => {
      t.upstream.device = { ...t.upstream.device, intervalSeconds: interval };
      const flowState = await startFlow(t);
      for (let second = 0; second <= 20; second++) {
        await assertPending(t, flowState, `at ${second} s`);
        t.clock.advance(1000);
      }
      assert.ok(t.upstream.calls.poll <= 20 / interval + 1, `${t.upstream.calls.poll} calls`);
      // …and yet GitLab is asked once every interval, not less.
      assert.ok(t.upstream.calls.poll >= Math.floor(20 / interval), `${t.upstream.calls.poll}`);
    }));
}

Deno.test("poll economy: a sign-in approved at GitLab completes at the page's first poll once the interval has passed", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    await assertPending(t, flowState, "first poll: GitLab says pending");
    assert.equal(t.upstream.calls.poll, 1);
    t.upstream.approve();
    for (let second = 1; second < 5; second++) {
      t.clock.advance(1000);
      await assertPending(t, flowState, `at ${second} s, from KV`);
    }
    assert.equal(t.upstream.calls.poll, 1, "GitLab not asked within the interval");
    t.clock.advance(1000);
    await pollCompletesAndExchanges(t, flowState);
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: the interval counts from GitLab's answer, not from our request", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    const answeredAt = t.clock.now() + 800;
    t.upstream.polls.push(() => {
      t.clock.current = answeredAt; // GitLab took 800 ms to answer
      return Promise.resolve({ kind: "pending" });
    });
    await assertPending(t, flowState, "first poll");
    t.clock.current = answeredAt + 4_999;
    await assertPending(t, flowState, "4.999 s after the answer");
    assert.equal(t.upstream.calls.poll, 1);
    t.clock.current = answeredAt + 5_000;
    await assertPending(t, flowState, "5 s after the answer");
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: a failed GitLab poll also waits out the interval", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push(new UpstreamError("transient", "http_502", "upstream answered HTTP 502"));
    await assertPending(t, flowState, "a 502 leaves the flow pending");
    t.clock.advance(4_999);
    await assertPending(t, flowState, "within the interval");
    assert.equal(t.upstream.calls.poll, 1);
    t.clock.advance(1);
    await assertPending(t, flowState, "after it");
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: two instances on one KV file → one GitLab call per interval between them", () =>
  withTwoInstances(async (a, b) => {
    const flowState = await startFlow(a);
    a.upstream.polls.push(slowPoll(50, { kind: "pending" }));
    const bodies = await Promise.all(
      Array.from({ length: 6 }, (_, i) => pollBody(i % 2 ? b : a, flowState)),
    );
    assert.deepEqual(bodies, bodies.map(() => ({ status: "pending" })));
    assert.equal(a.upstream.calls.poll, 1, "polls at once on both instances: one GitLab call");

    for (let second = 1; second < 5; second++) {
      a.clock.advance(1000);
      await assertPending(a, flowState, `instance a at ${second} s`);
      await assertPending(b, flowState, `instance b at ${second} s`);
    }
    assert.equal(a.upstream.calls.poll, 1, "neither instance asks GitLab within the interval");
    a.clock.advance(1000);
    await Promise.all([pollBody(a, flowState), pollBody(b, flowState)]);
    assert.equal(a.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: GitLab's 429 with Retry-After: 30 → no GitLab call for 30 s from either instance, for any flow", () =>
  withTwoInstances(async (a, b) => {
    const first = await startFlow(a);
    const second = await startFlow(b, { state: "another-sign-in" });
    a.upstream.polls.push({ kind: "rate_limited", backoff: { retryAfterSeconds: 30 } });
    const limitedAt = a.clock.now();
    await assertPending(a, first, "the 429 itself answers pending");
    assert.equal(a.upstream.calls.poll, 1);
    assert.equal((await recordsOf(a.kv, "pause")).length, 1, "one pause record for the service");

    for (let tick = 1; tick < 30; tick++) {
      a.clock.current = limitedAt + tick * 1000;
      await assertPending(a, first, `a/first at ${tick} s`);
      await assertPending(b, first, `b/first at ${tick} s`);
      await assertPending(a, second, `a/second at ${tick} s`);
      await assertPending(b, second, `b/second at ${tick} s`);
    }
    a.clock.current = limitedAt + 29_999;
    await assertPending(b, second, "29.999 s");
    assert.equal(a.upstream.calls.poll, 1, "GitLab heard nothing for 30 s");

    a.clock.current = limitedAt + 30_000;
    a.upstream.approve();
    const done = await pollBody(b, second);
    assert.equal(done.status, "complete", "polling resumes after 30 s");
    assert.equal(a.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: RateLimit-Remaining: 0 on a pending answer → paused until RateLimit-Reset (a Unix time)", () =>
  withApp(async (t) => {
    const first = await startFlow(t);
    const other = await startFlow(t, { state: "other" });
    const resetAt = t.clock.now() + 45_000;
    t.upstream.polls.push({ kind: "pending", backoff: { resumeAtEpochSeconds: resetAt / 1000 } });
    await assertPending(t, first, "the last request GitLab allowed");
    t.clock.current = resetAt - 1;
    await assertPending(t, other, "just before the reset");
    assert.equal(t.upstream.calls.poll, 1);
    t.clock.current = resetAt;
    await assertPending(t, other, "at the reset");
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: a 429 naming no time pauses for one interval", () =>
  withApp(async (t) => {
    const first = await startFlow(t);
    const other = await startFlow(t, { state: "other" });
    t.upstream.polls.push({ kind: "rate_limited", backoff: {} });
    await assertPending(t, first, "429");
    t.clock.advance(4_999);
    await assertPending(t, other, "within the interval");
    assert.equal(t.upstream.calls.poll, 1);
    t.clock.advance(1);
    await assertPending(t, other, "after it");
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: a pause from GitLab's headers lasts at most 15 minutes", () =>
  withApp(async (t) => {
    t.upstream.device = { ...t.upstream.device, expiresInSeconds: 3600 };
    const first = await startFlow(t);
    t.upstream.polls.push({ kind: "rate_limited", backoff: { retryAfterSeconds: 86_400 } });
    await assertPending(t, first, "429 asking for a day");
    t.clock.advance(15 * 60_000 - 1);
    await assertPending(t, first, "within 15 minutes");
    assert.equal(t.upstream.calls.poll, 1);
    t.clock.advance(1);
    await assertPending(t, first, "after 15 minutes");
    assert.equal(t.upstream.calls.poll, 2);
  }));

Deno.test("poll economy: a flow paused by GitLab's rate limit still expires on time", () =>
  withApp(async (t) => {
    t.upstream.device = { ...t.upstream.device, expiresInSeconds: 20 };
    const flowState = await startFlow(t);
    t.upstream.polls.push({ kind: "rate_limited", backoff: { retryAfterSeconds: 30 } });
    await assertPending(t, flowState, "429");
    t.clock.advance(20_001);
    const response = await poll(t, flowState);
    assert.equal(response.status, 400);
    assert.deepEqual(await response.json(), { status: "expired", error: "Device code expired" });
    assert.equal(t.upstream.calls.poll, 1);
  }));

Deno.test("poll economy: GitLab's token with RateLimit-Remaining: 0 is kept even when the pause cannot be stored", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push({
      kind: "token",
      tokens: { accessToken: "gl-at", refreshToken: "gl-rt", expiresInSeconds: 7200 },
      backoff: { retryAfterSeconds: 30 },
    });
    const store = t.store;
    t.deps.store = { ...store, pauseUpstream: () => Promise.reject(new Error("kv unavailable")) };
    const failed = await poll(t, flowState);
    await failed.body?.cancel();
    t.deps.store = store;
    // The device code is spent at GitLab: the token it bought must not be lost with the pause.
    await pollCompletesAndExchanges(t, flowState);
    assert.equal(t.upstream.calls.poll, 1, "GitLab asked once");
  }));
