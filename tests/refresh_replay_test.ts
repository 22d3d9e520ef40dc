/**
 * Opt-in REVOKE_ON_REFRESH_REPLAY (RFC 9700 §4.14.2): a session's exact previous refresh token,
 * presented after its rotation, ends the session and its GitLab token.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { randomToken } from "../src/crypto.ts";
import type { AccessTokenClaims } from "../src/jwt.ts";
import { sessionIdOf } from "../src/store/session_tokens.ts";
import {
  assertError,
  assertNo500,
  issueTokens,
  refresh,
  type TestApp,
  withEnv,
} from "./_helpers.ts";

const REPLAY = { REVOKE_ON_REFRESH_REPLAY: "true" };

/** Issues tokens and rotates them once: the rotated-away token and the current one. */
async function rotatedOnce(t: TestApp): Promise<{ previous: string; current: string }> {
  const { refresh_token: previous } = await issueTokens(t);
  const rotated = await refresh(t, previous);
  assert.equal(rotated.status, 200);
  return { previous, current: (await rotated.json()).refresh_token };
}

/** Asserts the refresh token answers 400 invalid_grant. */
async function assertRefused(t: TestApp, token: string, why: string): Promise<void> {
  await assertError(await refresh(t, token), 400, "invalid_grant");
  assert.ok(why);
}

Deno.test("refresh replay: the previous refresh token after rotation ends the session and its GitLab token", () =>
  withEnv(REPLAY, async (t) => {
    const { previous, current } = await rotatedOnce(t);
    await assertRefused(t, previous, "the replay itself is still invalid_grant");
    await assertRefused(t, current, "the current token stopped working");
    assert.equal(await t.store.getSession(sessionIdOf(current) ?? ""), null);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"], "GitLab token revoked");
  }));

Deno.test("refresh replay: the ended session's access tokens leave the gateway's memory at once", () =>
  withEnv(REPLAY, async (t) => {
    const { refresh_token: previous } = await issueTokens(t);
    const rotated = await (await refresh(t, previous)).json();
    const session = await t.store.getSession(sessionIdOf(rotated.refresh_token) ?? "");
    assert.ok(session);
    const claims = decodeJwt(rotated.access_token) as unknown as AccessTokenClaims;
    const accepted = {
      claims,
      expiresAtMs: t.clock.now() + 3_600_000,
      session: session.value,
      upstreamToken: "gl-access-0",
    };
    t.deps.verifiedTokens.remember(rotated.access_token, accepted, t.clock.now());
    assert.ok(t.deps.verifiedTokens.get(rotated.access_token, claims.iss, t.clock.now()));
    await assertRefused(t, previous, "the replay");
    assert.equal(
      t.deps.verifiedTokens.get(rotated.access_token, claims.iss, t.clock.now()),
      undefined,
    );
  }));

Deno.test("refresh replay: a made-up token naming the session, or an older one, ends nothing", () =>
  withEnv(REPLAY, async (t) => {
    const { previous: first, current: second } = await rotatedOnce(t);
    const third = (await (await refresh(t, second)).json()).refresh_token;
    const sessionId = sessionIdOf(third);
    await assertRefused(t, `${randomToken(32)}.${sessionId}`, "forged");
    await assertRefused(t, first, "two rotations back is not the exact previous token");
    assert.ok(await t.store.getSession(sessionId ?? ""), "the session lives");
    assert.equal(t.upstream.calls.revoke, 0);
    const next = await refresh(t, third);
    assert.equal(next.status, 200, "the current token still works");
    await next.body?.cancel();
  }));

Deno.test("refresh replay: with REFRESH_GRACE_SECONDS a replay inside the window is served, after it revokes", () =>
  withEnv({ ...REPLAY, REFRESH_GRACE_SECONDS: "30" }, async (t) => {
    const { previous, current } = await rotatedOnce(t);
    const retried = await refresh(t, previous);
    assert.equal(retried.status, 200, "the grace retry is served as without detection");
    assert.equal((await retried.json()).refresh_token, current);
    await assertRefused(t, previous, "a second retry inside the window");
    assert.ok(await t.store.getSession(sessionIdOf(current) ?? ""), "inside the window: lives");

    t.clock.advance(30_001);
    await assertRefused(t, previous, "after the window");
    await assertRefused(t, current, "the session ended");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
  }));

Deno.test("refresh replay: 20 parallel replays end the session once, all invalid_grant, no 500", () =>
  withEnv(REPLAY, async (t) => {
    for (let round = 1; round <= 3; round++) {
      const { previous, current } = await rotatedOnce(t);
      const results = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const response = await refresh(t, previous);
          return { status: response.status, body: await response.json() };
        }),
      );
      assertNo500(results);
      for (const result of results) {
        assert.equal(result.status, 400, `round ${round}`);
        assert.equal(result.body.error, "invalid_grant");
      }
      await assertRefused(t, current, "ended");
      assert.equal(t.upstream.calls.revoke, round, `round ${round}: one GitLab revocation`);
    }
  }));

Deno.test("refresh replay: off by default, the previous token is refused and the session lives", () =>
  withEnv({}, async (t) => {
    const { previous, current } = await rotatedOnce(t);
    await assertRefused(t, previous, "refused");
    const next = await refresh(t, current);
    assert.equal(next.status, 200);
    await next.body?.cancel();
    assert.equal(t.upstream.calls.revoke, 0);
  }));
