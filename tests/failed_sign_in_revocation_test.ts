/**
 * Issue 22 §1.13: when a sign-in fails after GitLab issued a token (the user lookup fails), that
 * token is revoked at GitLab: no session holds it, so nothing else ever would. A transient
 * failure of the device flow keeps it, for the next poll to use, and a flow that expires still
 * holding it has it revoked by the next sweep (issue 33 §1.9).
 */

import assert from "node:assert/strict";
import { sweepAbandonedSignIns } from "../src/session/end.ts";
import { StoreUnavailableError } from "../src/store/backend.ts";
import { sweepPeriodically } from "../src/app/periodic_sweep.ts";
import { type DevicePollResult, UpstreamError } from "../src/upstream/types.ts";
import {
  authorizeQuery,
  consentFormOf,
  CookieJar,
  countRecords,
  issueCode,
  poll,
  startFlow,
  TEST_BASE,
  type TestApp,
  withApp,
} from "./_helpers.ts";

async function redirectSignIn(t: TestApp): Promise<Response> {
  const jar = new CookieJar();
  const page = await t.app(
    new Request(`${TEST_BASE}/authorize?${authorizeQuery()}`, { headers: jar.headers() }),
  );
  jar.store(page);
  const consent = await t.app(
    new Request(`${TEST_BASE}/oauth/consent`, {
      method: "POST",
      headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ ...consentFormOf(await page.text()), action: "continue" }),
    }),
  );
  jar.store(consent);
  const state = new URL(consent.headers.get("location") ?? "").searchParams.get("state") ?? "";
  t.upstream.exchanges.push({ accessToken: "gl-orphan", refreshToken: "gl-orphan-r" });
  return await t.app(
    new Request(`${TEST_BASE}/oauth/callback?code=gl-code&state=${state}`, {
      headers: jar.headers(),
    }),
  );
}

for (const failure of ["terminal", "transient"] as const) {
  Deno.test(`redirect sign-in: a ${failure} user lookup failure revokes the GitLab token`, () =>
    withApp(async (t) => {
      t.upstream.user = new UpstreamError(
        failure,
        failure === "terminal" ? "invalid_token" : "timeout",
        "no user",
      );
      const back = await redirectSignIn(t);
      assert.equal(back.status, 302);
      assert.match(back.headers.get("location") ?? "", /error=/);
      assert.deepEqual(t.upstream.revokedTokens, ["gl-orphan"]);
    }, { env: { GITLAB_SIGN_IN: "redirect" } }));
}

Deno.test("device flow: a terminal user lookup failure revokes the token; a transient one keeps it", () =>
  withApp(async (t) => {
    const transient = await startFlow(t);
    t.upstream.approve();
    t.upstream.user = new UpstreamError("transient", "timeout", "slow");
    assert.equal((await (await poll(t, transient)).json()).status, "pending");
    assert.deepEqual(t.upstream.revokedTokens, [], "kept for the next poll");

    const terminal = await startFlow(t, { state: "other" });
    t.upstream.approve({ accessToken: "gl-terminal" });
    t.upstream.user = new UpstreamError("terminal", "invalid_token", "revoked");
    assert.equal((await (await poll(t, terminal)).json()).status, "failed");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-terminal"]);
  }));

Deno.test("device flow: a token GitLab issued while the flow expired under the poll is revoked, never dropped", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    // GitLab answers only when the test says so: the flow expires while it is being asked.
    let asked!: () => void;
    const gitlabAsked = new Promise<void>((resolve) => asked = resolve);
    let answer!: (result: DevicePollResult) => void;
    t.upstream.polls.push(() => {
      asked();
      return new Promise((resolve) => answer = resolve);
    });
    const holding = poll(t, flowState);
    await gitlabAsked;
    t.clock.advance(t.upstream.device.expiresInSeconds * 1000 + 1);
    assert.equal((await (await poll(t, flowState)).json()).status, "expired");
    answer({
      kind: "token",
      tokens: { accessToken: "gl-late", refreshToken: "gl-late-r", expiresInSeconds: 7200 },
    });
    // Its answer is the flow's next poll's to give (which finds it gone).
    assert.equal((await (await holding).json()).status, "pending");
    // No flow keeps it and no sweep will find it: it is revoked at once.
    assert.deepEqual(t.upstream.revokedTokens, ["gl-late"]);
    assert.equal(await countRecords(t.kv, "stranded"), 0);
  }));

/** A device flow whose GitLab token arrived but whose user lookup failed transiently. */
async function strandFlow(t: TestApp, state: string, gitlabToken: string): Promise<string> {
  const flowState = await startFlow(t, { state });
  t.upstream.approve({ accessToken: gitlabToken, refreshToken: `${gitlabToken}-r` });
  t.upstream.user = new UpstreamError("transient", "timeout", "slow");
  assert.equal((await (await poll(t, flowState)).json()).status, "pending");
  return flowState;
}

Deno.test("device flow: a token kept after a transient failure is revoked once the flow expires unfinished (issue 33 §1.9)", () =>
  withApp(async (t) => {
    await strandFlow(t, "stranded", "gl-stranded");
    // Another flow holds a token too, and finishes: its token belongs to a session now.
    const finished = await strandFlow(t, "finished", "gl-finished");
    t.upstream.user = { id: 4242, username: "ada" };
    t.clock.advance(6_000);
    assert.equal((await (await poll(t, finished)).json()).status, "complete");
    assert.equal(await countRecords(t.kv, "stranded"), 1, "only the unfinished flow's");

    t.clock.advance(t.upstream.device.expiresInSeconds * 1000 + 1);
    await issueCode(t); // a sign-in completing runs the sweep
    assert.deepEqual(t.upstream.revokedTokens, ["gl-stranded"]);
    assert.equal(await countRecords(t.kv, "stranded"), 0);
  }));

Deno.test("device flow: parallel sweeps revoke a stranded token exactly once", () =>
  withApp(async (t) => {
    await strandFlow(t, "a", "gl-a");
    await strandFlow(t, "b", "gl-b");
    t.upstream.user = { id: 4242, username: "ada" };
    t.clock.advance(t.upstream.device.expiresInSeconds * 1000 + 1);
    const { store, logger, verifiedTokens } = t.deps;
    const deps = { store, logger, verifiedTokens, upstream: t.upstream };
    await Promise.all(Array.from({ length: 10 }, () => sweepAbandonedSignIns(deps, {})));
    assert.deepEqual(t.upstream.revokedTokens.sort(), ["gl-a", "gl-b"]);
  }));

Deno.test("device flow: on an idle service the periodic sweep revokes a stranded token, no sign-in needed", () =>
  withApp(async (t) => {
    await strandFlow(t, "idle", "gl-idle");
    t.upstream.user = { id: 4242, username: "ada" };
    t.clock.advance(t.upstream.device.expiresInSeconds * 1000 + 1);
    // No sign-in completes: only the service's own sweep can revoke it.
    const sweep = sweepPeriodically(t.deps, undefined);
    await sweep.tick();
    sweep.stop();
    assert.deepEqual(t.upstream.revokedTokens, ["gl-idle"]);
    assert.equal(await countRecords(t.kv, "stranded"), 0);
  }));

Deno.test("device flow: a page polling past the expiry of a flow that holds a token has it revoked, not dropped", () =>
  withApp(async (t) => {
    const flowState = await strandFlow(t, "late poll", "gl-expired");
    t.clock.advance(t.upstream.device.expiresInSeconds * 1000 + 1);
    // The page keeps polling after its countdown ends: this poll finds the flow expired and
    // deletes it, with the copy a sweep would have revoked.
    const expired = await poll(t, flowState);
    assert.equal(expired.status, 400);
    assert.deepEqual(await expired.json(), { status: "expired", error: "Device code expired" });
    assert.deepEqual(t.upstream.revokedTokens, ["gl-expired"]);
    assert.equal(await countRecords(t.kv, "stranded"), 0);
    assert.equal(await countRecords(t.kv, "flow"), 0);
  }));

Deno.test("device flow: a store that cannot keep the token GitLab just issued has it revoked", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.approve({ accessToken: "gl-unsaved" });
    t.store.saveFlowUpstreamTokens = () => Promise.reject(new StoreUnavailableError("down"));
    const response = await poll(t, flowState);
    assert.equal(response.status, 503, await response.text());
    // The device code is spent: GitLab will not hand this token over again, and no record holds it.
    assert.deepEqual(t.upstream.revokedTokens, ["gl-unsaved"]);
  }));
