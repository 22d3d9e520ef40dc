/**
 * A refresh whose rotation loses a race: to a save of the session by something else (the
 * gateway storing a new access decision or GitLab tokens), after which the token is still the
 * session's current one, the refresh is served; to another refresh with the same token, the
 * loser presented a token rotated away, which is what REFRESH_GRACE_SECONDS and
 * REVOKE_ON_REFRESH_REPLAY are about (RFC 9700 §4.14.2), just as when it came a moment later.
 * GitLab's group lookup during the refresh's access re-check holds both requests at one point.
 */

import assert from "node:assert/strict";
import { sessionIdOf } from "../src/store/session_tokens.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { issueTokens, type Json, refresh, TEST_BASE, type TestApp, withEnv } from "./_helpers.ts";

const RECHECKED = { ALLOWED_GITLAB_GROUPS: "acme:developer", ACCESS_RECHECK_SECONDS: "900" };
const MINUTE = 60_000;

/** A signed-in member of acme whose access decision is due again at the next refresh. */
async function dueForRecheck(t: TestApp): Promise<string> {
  t.upstream.groupLevels = { acme: 30 };
  const { refresh_token } = await issueTokens(t);
  t.clock.advance(16 * MINUTE);
  return refresh_token;
}

/** GitLab's group lookup answers once `parties` lookups are waiting (they overlap for sure). */
function meetAtMembership(t: TestApp, parties: number): void {
  let release!: () => void;
  const met = new Promise<void>((resolve) => release = resolve);
  let waiting = 0;
  t.upstream.membership = async () => {
    if (++waiting === parties) release();
    await met;
    return 30;
  };
}

function revoke(t: TestApp, token: string): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/revoke`, { method: "POST", body: new URLSearchParams({ token }) }),
  );
}

async function answer(response: Response): Promise<{ status: number; body: Json }> {
  return { status: response.status, body: await response.json() };
}

Deno.test("refresh race: a save of the session during the refresh (a new access decision) does not refuse it", () =>
  withEnv(RECHECKED, async (t) => {
    const token = await dueForRecheck(t);
    const sessionId = sessionIdOf(token) ?? "";
    t.upstream.membership = async () => {
      // What the gateway does meanwhile: it stores the session with its own new decision.
      const session = await t.store.getSession(sessionId);
      assert.ok(session);
      const access = { ...session.value.access!, checkedAt: t.clock.now() };
      assert.ok(await t.store.saveSession(session, { ...session.value, access }));
      return 30;
    };
    const refreshed = await answer(await refresh(t, token));
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
    const next = await refresh(t, refreshed.body.refresh_token);
    assert.equal(next.status, 200, "the new token is the session's");
    await next.body?.cancel();
  }));

Deno.test("refresh race: REVOKE_ON_REFRESH_REPLAY, two refreshes with one token at once end the session", () =>
  withEnv({ ...RECHECKED, REVOKE_ON_REFRESH_REPLAY: "true" }, async (t) => {
    const token = await dueForRecheck(t);
    meetAtMembership(t, 2);
    const [one, two] = await Promise.all([refresh(t, token), refresh(t, token)]);
    const [first, second] = [await answer(one), await answer(two)];
    const [winner, loser] = first.status === 200 ? [first, second] : [second, first];
    assert.equal(winner.status, 200, JSON.stringify(winner.body));
    assert.equal(loser.status, 400);
    assert.equal(loser.body.error, "invalid_grant");
    const after = await refresh(t, winner.body.refresh_token);
    assert.equal(after.status, 400, "the token was used twice: the session ended");
    await after.body?.cancel();
    assert.equal(await t.store.getSession(sessionIdOf(token) ?? ""), null);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"], "GitLab token revoked once");
  }));

Deno.test("refresh race: with REFRESH_GRACE_SECONDS, two refreshes with one token at once both get the new pair", () =>
  withEnv(
    { ...RECHECKED, REVOKE_ON_REFRESH_REPLAY: "true", REFRESH_GRACE_SECONDS: "5" },
    async (t) => {
      const token = await dueForRecheck(t);
      meetAtMembership(t, 2);
      const [first, second] = await Promise.all([refresh(t, token), refresh(t, token)]);
      const answers = [await answer(first), await answer(second)];
      assert.deepEqual(answers.map((a) => a.status), [200, 200], JSON.stringify(answers));
      assert.deepEqual(answers[0].body, answers[1].body, "the same pair, as a retry gets it");
      const next = await refresh(t, answers[0].body.refresh_token);
      assert.equal(next.status, 200, "the session lives");
      await next.body?.cancel();
      assert.equal(t.upstream.calls.revoke, 0);
    },
  ));

Deno.test("refresh race: a session revoked while GitLab renews its token has the new GitLab token revoked too", () =>
  withEnv({}, async (t) => {
    const { refresh_token } = await issueTokens(t);
    const session = await t.store.getSession(sessionIdOf(refresh_token) ?? "");
    assert.ok(session);
    t.clock.current = session.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + MINUTE;
    t.upstream.refreshes.push(async () => {
      // The user revokes the session while GitLab is issuing the new pair.
      const revoked = await revoke(t, refresh_token);
      assert.equal(revoked.status, 200);
      return {
        accessToken: "gl-access-new",
        refreshToken: "gl-refresh-new",
        expiresInSeconds: 7200,
      };
    });
    const refused = await refresh(t, refresh_token);
    assert.equal(refused.status, 400);
    await refused.body?.cancel();
    assert.deepEqual(
      t.upstream.revokedTokens.sort(),
      ["gl-access-0", "gl-access-new"],
      "no GitLab token outlives the session",
    );
  }));

Deno.test("refresh race: /revoke revokes the GitLab token the session holds when it ends, not the one it read", () =>
  withEnv({}, async (t) => {
    const { access_token, refresh_token } = await issueTokens(t);
    const sessionId = sessionIdOf(refresh_token) ?? "";
    const read = t.store.getSession.bind(t.store);
    let renewed = false;
    t.store.getSession = async (id) => {
      const found = await read(id);
      if (found && !renewed) {
        // Another instance's gateway stores a renewed GitLab token just after /revoke read.
        renewed = true;
        const sealedUpstreamTokens = await t.store.sealUpstreamTokens({
          accessToken: "gl-access-renewed",
          refreshToken: "gl-refresh-renewed",
        });
        assert.ok(await t.store.saveSession(found, { ...found.value, sealedUpstreamTokens }));
      }
      return found;
    };
    assert.equal((await revoke(t, access_token)).status, 200);
    assert.ok(renewed);
    assert.equal(await read(sessionId), null, "the session ended");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-renewed"]);
  }));

/** The session's GitLab token within five minutes of its expiry: the next use renews it. */
async function renewalDue(t: TestApp): Promise<string> {
  const { refresh_token } = await issueTokens(t);
  const session = await t.store.getSession(sessionIdOf(refresh_token) ?? "");
  assert.ok(session);
  t.clock.current = session.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + MINUTE;
  return refresh_token;
}

/** GitLab refuses every renewal with `error`, after a moment (so parallel requests overlap). */
function refusingRenewals(t: TestApp, error: string): void {
  const refuse = async (): Promise<never> => {
    await new Promise((resolve) => setTimeout(resolve, 10));
    throw new UpstreamError("terminal", error, error, 400);
  };
  for (let i = 0; i < 20; i++) t.upstream.refreshes.push(refuse);
}

Deno.test("refresh race: GitLab refusing the renewal (invalid_grant) ends the session, asked once for 20 refreshes", () =>
  withEnv({}, async (t) => {
    const token = await renewalDue(t);
    refusingRenewals(t, "invalid_grant");
    const results = await Promise.all(
      Array.from({ length: 20 }, async () => answer(await refresh(t, token))),
    );
    for (const result of results) {
      assert.equal(result.status, 400, JSON.stringify(result.body));
      assert.equal(result.body.error, "invalid_grant");
    }
    assert.equal(t.upstream.calls.refresh, 1, "a refused GitLab refresh token is not sent again");
    assert.equal(await t.store.getSession(sessionIdOf(token) ?? ""), null, "the session ended");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
  }));

Deno.test("refresh race: GitLab refusing our application (invalid_client) keeps the session", () =>
  withEnv({}, async (t) => {
    // A wrong GITLAB_CLIENT_SECRET is the operator's to fix: no user loses a session over it.
    const token = await renewalDue(t);
    refusingRenewals(t, "invalid_client");
    assert.equal((await answer(await refresh(t, token))).status, 400);
    assert.ok(await t.store.getSession(sessionIdOf(token) ?? ""), "the session lives");
    t.upstream.refreshes.length = 0;
    assert.equal((await answer(await refresh(t, token))).status, 200, "renewed once fixed");
  }));
