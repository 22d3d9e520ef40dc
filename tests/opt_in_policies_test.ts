/** The opt-in policies, off by default (docs/security.md "Opt-in policies"). */

import assert from "node:assert/strict";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import {
  assertNo500,
  assertOneWinner,
  countRecords,
  exchange,
  issueCode,
  issueTokens,
  makeTestApp,
  refresh,
  withApp,
} from "./_helpers.ts";

const GRACE = { env: { REFRESH_GRACE_SECONDS: "30" } };

Deno.test("REVOKE_ON_CODE_REPLAY=true: a replayed code is refused and ends the session it created", async () => {
  const t = await makeTestApp({ env: { REVOKE_ON_CODE_REPLAY: "true" } });
  try {
    const code = await issueCode(t);
    const first = await exchange(t, code);
    assert.equal(first.status, 200);
    const { refresh_token } = await first.json();

    const replay = await exchange(t, code);
    assert.equal(replay.status, 400);
    assert.equal((await replay.json()).error, "invalid_grant");

    const refreshed = await refresh(t, refresh_token);
    assert.equal(refreshed.status, 400);
    assert.equal((await refreshed.json()).error, "invalid_grant");
  } finally {
    t.close();
  }
});

Deno.test("REVOKE_ON_CODE_REPLAY=true: parallel replays revoke the session's GitLab token once", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const first = await exchange(t, code);
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const replays = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const response = await exchange(t, code);
        return { status: response.status, body: await response.json() };
      }),
    );
    assertNo500(replays);
    assert.ok(replays.every((r) => r.status === 400 && r.body.error === "invalid_grant"));
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
  }, { env: { REVOKE_ON_CODE_REPLAY: "true" } }));

Deno.test("REVOKE_ON_CODE_REPLAY=true: a refresh between the replay's read and its delete does not save the GitLab token", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const { refresh_token } = await (await exchange(t, code)).json();
    const read = t.store.getCodeAndSession.bind(t.store);
    t.store.getCodeAndSession = async (value) => {
      const found = await read(value);
      // The first redeemer refreshes after the replay read the session.
      assert.equal((await refresh(t, refresh_token)).status, 200);
      return found;
    };
    const replay = await exchange(t, code);
    assert.equal((await replay.json()).error, "invalid_grant");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
    assert.equal(await countRecords(t.kv, "session"), 0);
  }, { env: { REVOKE_ON_CODE_REPLAY: "true" } }));

Deno.test("REVOKE_ON_CODE_REPLAY off (default): a replay is refused and the session lives on", async () => {
  const t = await makeTestApp();
  try {
    const code = await issueCode(t);
    const { refresh_token } = await (await exchange(t, code)).json();
    assert.equal((await exchange(t, code)).status, 400);
    const refreshed = await refresh(t, refresh_token);
    assert.equal(refreshed.status, 200);
    assert.equal(await countRecords(t.kv, "code"), 0, "code deleted");
  } finally {
    t.close();
  }
});

Deno.test("REFRESH_GRACE_SECONDS: the previous token gets the same new pair once within the window", () =>
  withApp(async (t) => {
    const { refresh_token: old } = await issueTokens(t);
    const rotated = await (await refresh(t, old)).json();

    const retried = await refresh(t, old);
    assert.equal(retried.status, 200);
    assert.deepEqual(await retried.json(), rotated);

    const again = await refresh(t, old);
    assert.equal(again.status, 400, "only once");
    await again.body?.cancel();

    const next = await refresh(t, rotated.refresh_token);
    assert.equal(next.status, 200, "the new token still works");
  }, GRACE));

Deno.test("REFRESH_GRACE_SECONDS: 20 parallel retries with the previous token → exactly one 200", () =>
  withApp(async (t) => {
    for (let round = 1; round <= 5; round++) {
      const { refresh_token: old } = await issueTokens(t);
      const rotated = await (await refresh(t, old)).json();
      const results = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const response = await refresh(t, old);
          return { status: response.status, body: await response.json() };
        }),
      );
      assert.deepEqual(assertOneWinner(results).body, rotated, `round ${round}`);
      assert.equal((await refresh(t, rotated.refresh_token)).status, 200);
    }
  }, GRACE));

Deno.test("REFRESH_GRACE_SECONDS: the grace outlives a save of the session's GitLab tokens", () =>
  withApp(async (t) => {
    const { refresh_token: old } = await issueTokens(t);
    const rotated = await (await refresh(t, old)).json();
    const session = (await findSessionByRefreshToken(t.store, rotated.refresh_token))!;
    const sealedUpstreamTokens = await t.store.sealUpstreamTokens({
      accessToken: "gl-access-saved",
      refreshToken: "gl-refresh-saved",
    });
    assert.ok(await t.store.saveSession(session, { ...session.value, sealedUpstreamTokens }));
    const retried = await refresh(t, old);
    assert.equal(retried.status, 200);
    assert.deepEqual(await retried.json(), rotated);
  }, GRACE));

Deno.test("REFRESH_GRACE_SECONDS: no grace once the new token was used, nor after the window", () =>
  withApp(async (t) => {
    const { refresh_token: first } = await issueTokens(t);
    const second = (await (await refresh(t, first)).json()).refresh_token;
    const third = (await (await refresh(t, second)).json()).refresh_token;
    const stale = await refresh(t, first);
    assert.equal((await stale.json()).error, "invalid_grant", "the session moved on");

    t.clock.advance(31_000);
    const late = await refresh(t, second);
    assert.equal((await late.json()).error, "invalid_grant", "the window has passed");

    const current = await refresh(t, third);
    assert.equal(current.status, 200, "refused retries do not break the current token");
    await current.body?.cancel();
  }, GRACE));

Deno.test("REFRESH_GRACE_SECONDS off (default): the previous token is invalid at once", async () => {
  const t = await makeTestApp();
  try {
    const { refresh_token: old } = await issueTokens(t);
    await (await refresh(t, old)).body?.cancel();
    const retried = await refresh(t, old);
    assert.equal((await retried.json()).error, "invalid_grant");
  } finally {
    t.close();
  }
});
