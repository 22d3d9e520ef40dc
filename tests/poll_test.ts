/**
 * `GET /oauth/poll` against spec §4.2, the device-flow states of §3.1 and the poll body of §2.4.
 */

import assert from "node:assert/strict";
import type { LogFields, Logger } from "../src/logger.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { kindOfKey, recordsOf } from "../src/store/keys.ts";
import {
  gitlabTokensOf,
  PKCE,
  poll,
  startFlow,
  TEST_BASE,
  TEST_REDIRECT as REDIRECT,
  type TestApp,
  withApp,
} from "./_helpers.ts";

const TEN_MINUTES = 10 * 60 * 1000;

interface Polled {
  status: number;
  body: Record<string, unknown>;
  headers: Headers;
}

async function pollOnce(t: TestApp, flowState: string): Promise<Polled> {
  const response = await poll(t, flowState);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  return { status: response.status, body: await response.json(), headers: response.headers };
}

async function pollQuery(t: TestApp, query: string): Promise<Polled> {
  const response = await t.app(new Request(`${TEST_BASE}/oauth/poll${query}`));
  return { status: response.status, body: await response.json(), headers: response.headers };
}

async function kvKinds(t: TestApp): Promise<string[]> {
  return (await recordsOf(t.kv)).map((entry) => String(kindOfKey(entry.key))).sort();
}

function recordingLogger(): Logger & { lines: { level: string; message: string }[] } {
  const lines: { level: string; message: string }[] = [];
  const log = (level: string) => (message: string, _fields?: LogFields) => {
    lines.push({ level, message });
  };
  return { lines, info: log("info"), warn: log("warn"), error: log("error") };
}

const TERMINAL_ERRORS = {
  denied: new UpstreamError(
    "terminal",
    "access_denied",
    "The resource owner or authorization server denied the request.",
  ),
  expired: new UpstreamError(
    "terminal",
    "expired_token",
    "The device_code has expired, and the device authorization session has concluded.",
  ),
  invalid: new UpstreamError(
    "terminal",
    "invalid_grant",
    "The provided authorization grant is invalid, expired, or revoked.",
  ),
} as const;

const TRANSIENT_ERRORS = [
  new UpstreamError("transient", "timeout", "GitLab did not answer within 10000 ms"),
  new UpstreamError("transient", "network", "connection reset"),
  new UpstreamError("transient", "http_502", "GitLab answered 502"),
  new UpstreamError("transient", "malformed", "GitLab answered something that is not JSON"),
];

/** Asserts a complete body and returns its code. */
function assertComplete(polled: Polled, expected: { redirect_uri?: string; state?: string }) {
  assert.equal(polled.status, 200, JSON.stringify(polled.body));
  assert.equal(polled.body.status, "complete");
  assert.equal(typeof polled.body.code, "string");
  assert.ok((polled.body.code as string).length > 0);
  assert.deepEqual(polled.body, { status: "complete", code: polled.body.code, ...expected });
  return polled.body.code as string;
}

// ---- 4.2 table -------------------------------------------------------------------------------

Deno.test("4.2 OAuth configuration missing → 500 body only {error: server_error}", () =>
  withApp(async (t) => {
    const polled = await pollOnce(t, "anything");
    assert.equal(polled.status, 500);
    assert.deepEqual(polled.body, { error: "server_error" });
    assert.deepEqual(await kvKinds(t), []);
  }, { configured: false }));

Deno.test("4.2 flow_state missing → 400 {status: failed, error: 'Missing flow_state'}", () =>
  withApp(async (t) => {
    for (const query of ["", "?", "?flow_state=", "?other=1"]) {
      const polled = await pollQuery(t, query);
      assert.equal(polled.status, 400, query);
      assert.deepEqual(polled.body, { status: "failed", error: "Missing flow_state" });
    }
    assert.equal(t.upstream.calls.poll, 0);
  }));

Deno.test("4.2 No record for flow_state → 400 {status: expired, error: 'Flow not found'}", () =>
  withApp(async (t) => {
    await startFlow(t);
    const polled = await pollOnce(t, "no-such-flow-state");
    assert.equal(polled.status, 400);
    assert.deepEqual(polled.body, { status: "expired", error: "Flow not found" });
    assert.equal(t.upstream.calls.poll, 0);
  }));

Deno.test("4.2 Record past expiresAt → 400 expired 'Device code expired', record deleted", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.clock.advance(t.upstream.device.expiresInSeconds * 1000 + 1);
    t.upstream.approve(); // too late: upstream is not even asked
    const polled = await pollOnce(t, flowState);
    assert.equal(polled.status, 400);
    assert.deepEqual(polled.body, { status: "expired", error: "Device code expired" });
    assert.equal(t.upstream.calls.poll, 0);
    assert.equal(await t.store.getFlow(flowState), null);
    const again = await pollOnce(t, flowState);
    assert.equal(again.status, 400);
    assert.deepEqual(again.body, { status: "expired", error: "Flow not found" });
  }));

Deno.test("4.2 Record exactly at expiresAt is not yet past it → still polled", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.clock.advance(t.upstream.device.expiresInSeconds * 1000);
    const polled = await pollOnce(t, flowState);
    assert.equal(polled.status, 200);
    assert.deepEqual(polled.body, { status: "pending" });
    assert.equal(t.upstream.calls.poll, 1);
  }));

Deno.test("4.2 Upstream yields token → 200 {status: complete, redirect_uri, code, state}", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.approve();
    const polled = await pollOnce(t, flowState);
    assertComplete(polled, { redirect_uri: REDIRECT, state: "xyz" });
    assert.equal(polled.headers.get("cache-control"), "no-store");
  }));

Deno.test("4.2 Upstream yields no token → 200 {status: pending}", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push({ kind: "pending" }, { kind: "pending" }, { kind: "slow_down" });
    for (let i = 0; i < 3; i++) {
      const polled = await pollOnce(t, flowState);
      assert.equal(polled.status, 200);
      assert.deepEqual(polled.body, { status: "pending" });
      t.clock.advance(5_000); // the interval: the upstream is asked again
    }
    assert.equal(t.upstream.calls.poll, 3);
    assert.ok(await t.store.getFlow(flowState));
    assert.deepEqual((await pollOnce(t, flowState)).body, { status: "pending" });
  }));

Deno.test("4.2 Upstream error containing expired, denied or invalid → 200 failed <message>, record deleted", () =>
  withApp(async (t) => {
    for (const error of Object.values(TERMINAL_ERRORS)) {
      const flowState = await startFlow(t);
      t.upstream.polls.push(error);
      const polled = await pollOnce(t, flowState);
      assert.equal(polled.status, 200);
      assert.deepEqual(polled.body, { status: "failed", error: error.message });
      assert.equal(await t.store.getFlow(flowState), null);
    }
    assert.deepEqual(await kvKinds(t), []);
  }));

Deno.test("4.2 Any other upstream error → 200 {status: pending}, flow kept", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    for (const error of TRANSIENT_ERRORS) {
      t.upstream.polls.push(error);
      const polled = await pollOnce(t, flowState);
      assert.equal(polled.status, 200);
      assert.deepEqual(polled.body, { status: "pending" });
      assert.ok(await t.store.getFlow(flowState), "flow survives");
      t.clock.advance(5_000);
    }
    t.upstream.approve();
    assertComplete(await pollOnce(t, flowState), { redirect_uri: REDIRECT, state: "xyz" });
  }));

Deno.test("4.2 success order: user fetched, code stored with 10-minute lifetime, session created, flow deleted", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.clock.advance(12_345);
    const now = t.clock.now();
    t.upstream.approve({ accessToken: "gl-at", refreshToken: "gl-rt", expiresInSeconds: 7200 });
    t.upstream.user = { id: 777, username: "grace" };
    const code = assertComplete(await pollOnce(t, flowState), {
      redirect_uri: REDIRECT,
      state: "xyz",
    });
    assert.equal(t.upstream.calls.user, 1);

    const stored = await t.store.getCode(code);
    assert.ok(stored, "authorization code stored");
    assert.equal(stored.value.expiresAt, now + TEN_MINUTES);
    assert.equal(stored.value.clientId, "client-1");
    assert.equal(stored.value.codeChallenge, PKCE.challenge);
    assert.equal(stored.value.codeChallengeMethod, "S256");
    assert.equal(stored.value.redirectUri, REDIRECT);

    const session = await t.store.getSession(stored.value.sessionId);
    assert.ok(session, "session created");
    assert.equal(session.value.id, stored.value.sessionId);
    assert.deepEqual(session.value.scopes, ["mcp:tools", "mcp:resources"]);
    assert.equal(session.value.mcpRefreshTokenHash, "");
    assert.equal(session.value.mcpTokenExpiry, 0);
    assert.deepEqual(await gitlabTokensOf(t.store, session), {
      accessToken: "gl-at",
      refreshToken: "gl-rt",
    });
    assert.equal(session.value.upstreamTokenExpiry, now + 7200 * 1000);
    assert.equal(session.value.upstreamUserId, "777");
    assert.equal(session.value.upstreamUsername, "grace");
    assert.equal(session.value.clientId, "client-1");
    assert.equal(session.value.createdAt, now);
    assert.equal(session.value.updatedAt, now);

    assert.equal(await t.store.getFlow(flowState), null, "flow deleted");
    assert.deepEqual(await kvKinds(t), ["code", "session", "unredeemed"]);
  }));

Deno.test("4.2 fetchUser failing terminally → 200 failed <message>, record deleted, nothing else stored", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.approve();
    const error = new UpstreamError("terminal", "invalid_token", "Token is invalid or revoked");
    t.upstream.user = error;
    const polled = await pollOnce(t, flowState);
    assert.equal(polled.status, 200);
    assert.deepEqual(polled.body, { status: "failed", error: error.message });
    assert.equal(await t.store.getFlow(flowState), null);
    assert.deepEqual(await kvKinds(t), [], "no code, no session");
    const again = await pollOnce(t, flowState);
    assert.equal(again.status, 400);
    assert.deepEqual(again.body, { status: "expired", error: "Flow not found" });
  }));

Deno.test("4.2 fetchUser failing transiently → 200 pending; next poll completes without polling the device endpoint again", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.approve();
    t.upstream.user = new UpstreamError("transient", "http_503", "GitLab answered 503");
    const first = await pollOnce(t, flowState);
    assert.equal(first.status, 200);
    assert.deepEqual(first.body, { status: "pending" });
    assert.equal(t.upstream.calls.poll, 1);
    assert.equal(t.upstream.calls.user, 1);
    assert.deepEqual(
      await kvKinds(t),
      ["flow", "repeat", "stranded"],
      "no code, no session yet; the token is watched in case the flow is abandoned",
    );

    t.upstream.user = { id: 4242, username: "ada" };
    const code = assertComplete(await pollOnce(t, flowState), {
      redirect_uri: REDIRECT,
      state: "xyz",
    });
    assert.equal(t.upstream.calls.poll, 1, "device endpoint not polled again");
    assert.equal(t.upstream.calls.user, 2);
    const stored = await t.store.getCode(code);
    assert.ok(stored);
    const session = await t.store.getSession(stored.value.sessionId);
    assert.equal((await gitlabTokensOf(t.store, session))?.accessToken, "gl-access-0");
    assert.ok(!(await kvKinds(t)).includes("stranded"), "the session holds the token now");
  }));

// ---- 2.4 poll body ---------------------------------------------------------------------------

Deno.test("2.4 complete: redirect_uri absent when the authorization request had none", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t, { redirect_uri: null });
    t.upstream.approve();
    const polled = await pollOnce(t, flowState);
    assertComplete(polled, { state: "xyz" });
    assert.equal(Object.hasOwn(polled.body, "redirect_uri"), false);
  }));

Deno.test("2.4 complete: state omitted when /authorize sent none or an empty one", () =>
  withApp(async (t) => {
    for (const state of [null, ""]) {
      const flowState = await startFlow(t, { state });
      t.upstream.approve();
      const polled = await pollOnce(t, flowState);
      assertComplete(polled, { redirect_uri: REDIRECT });
      assert.equal(Object.hasOwn(polled.body, "state"), false);
    }
  }));

Deno.test("2.4 pending / failed / expired bodies carry exactly their fields", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    assert.deepEqual(Object.keys((await pollOnce(t, flowState)).body), ["status"]);
    t.clock.advance(5_000);
    t.upstream.polls.push(TERMINAL_ERRORS.denied);
    assert.deepEqual(Object.keys((await pollOnce(t, flowState)).body).sort(), ["error", "status"]);
    assert.deepEqual(Object.keys((await pollOnce(t, flowState)).body).sort(), ["error", "status"]);
  }));

// ---- 3.1 state table -------------------------------------------------------------------------

Deno.test("3.1 (none) → pending: GET /authorize succeeds → record stored, HTML page", () =>
  withApp(async (t) => {
    const response = await t.app(
      new Request(
        `${TEST_BASE}/authorize?response_type=code&client_id=c&code_challenge=${PKCE.challenge}&code_challenge_method=S256`,
      ),
    );
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
    await response.body?.cancel();
    // And the request, so that an identical one within 60 s shows this flow.
    assert.deepEqual(await kvKinds(t), ["flow", "repeat"]);
  }));

Deno.test("3.1 pending → complete: upstream poll yields a token", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    assert.deepEqual((await pollOnce(t, flowState)).body, { status: "pending" });
    t.upstream.approve();
    t.clock.advance(5_000);
    assertComplete(await pollOnce(t, flowState), { redirect_uri: REDIRECT, state: "xyz" });
    assert.equal(t.upstream.calls.user, 1);
    assert.deepEqual(await kvKinds(t), ["code", "session", "unredeemed"]);
  }));

Deno.test("3.1 pending → pending: upstream poll yields no token yet", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    const before = await t.store.getFlow(flowState);
    const polled = await pollOnce(t, flowState);
    assert.equal(polled.status, 200);
    assert.deepEqual(polled.body, { status: "pending" });
    const after = await t.store.getFlow(flowState);
    assert.ok(before && after);
    // No other effect than when the upstream may be asked next (one interval on).
    assert.deepEqual(after.value, { ...before.value, nextPollAt: t.clock.now() + 5_000 });
  }));

for (const word of ["expired", "denied", "invalid"] as const) {
  Deno.test(`3.1 pending → failed: upstream error containing ${word}`, () =>
    withApp(async (t) => {
      const flowState = await startFlow(t);
      const error = TERMINAL_ERRORS[word];
      assert.match(error.message, new RegExp(word));
      t.upstream.polls.push(error);
      const polled = await pollOnce(t, flowState);
      assert.equal(polled.status, 200);
      assert.deepEqual(polled.body, { status: "failed", error: error.message });
      assert.equal(await t.store.getFlow(flowState), null, "record deleted");
    }));
}

Deno.test("3.1 pending → pending: any other upstream error, warning logged", async () => {
  const logger = recordingLogger();
  await withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push(TRANSIENT_ERRORS[0]);
    const polled = await pollOnce(t, flowState);
    assert.equal(polled.status, 200);
    assert.deepEqual(polled.body, { status: "pending" });
    assert.ok(await t.store.getFlow(flowState), "record kept");
    assert.ok(logger.lines.some((line) => line.level === "warn"), "a warning is logged");
  }, { logger });
});

Deno.test("3.1 pending → expired: current time after expiresAt → 400, record deleted", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    assert.deepEqual((await pollOnce(t, flowState)).body, { status: "pending" });
    t.clock.advance(10 * 60 * 1000);
    const polled = await pollOnce(t, flowState);
    assert.equal(polled.status, 400);
    assert.deepEqual(polled.body, { status: "expired", error: "Device code expired" });
    assert.deepEqual(await kvKinds(t), []);
  }));

Deno.test("3.1 any → expired: flow_state unknown or record already deleted → 400", () =>
  withApp(async (t) => {
    const unknown = await pollOnce(t, "never-issued");
    assert.equal(unknown.status, 400);
    assert.deepEqual(unknown.body, { status: "expired", error: "Flow not found" });

    const flowState = await startFlow(t);
    t.upstream.polls.push(TERMINAL_ERRORS.denied);
    assert.equal((await pollOnce(t, flowState)).body.status, "failed");
    const deleted = await pollOnce(t, flowState);
    assert.equal(deleted.status, 400);
    assert.deepEqual(deleted.body, { status: "expired", error: "Flow not found" });
  }));

Deno.test("3.1 any → failed: flow_state missing → 400", () =>
  withApp(async (t) => {
    await startFlow(t);
    const polled = await pollQuery(t, "");
    assert.equal(polled.status, 400);
    assert.deepEqual(polled.body, { status: "failed", error: "Missing flow_state" });
    assert.equal(t.upstream.calls.poll, 0);
  }));

Deno.test("3.1 after complete, a further poll → 400 expired 'Flow not found'", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.approve();
    assertComplete(await pollOnce(t, flowState), { redirect_uri: REDIRECT, state: "xyz" });
    const polled = await pollOnce(t, flowState);
    assert.equal(polled.status, 400);
    assert.deepEqual(polled.body, { status: "expired", error: "Flow not found" });
    assert.equal(t.upstream.calls.poll, 1);
    assert.equal(t.upstream.calls.user, 1);
  }));
