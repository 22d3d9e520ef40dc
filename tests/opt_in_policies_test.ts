/** The opt-in policies, off by default (README "Opt-in policies"). */

import assert from "node:assert/strict";
import { issueCode, issueTokens, makeTestApp, PKCE, token } from "./_helpers.ts";

const REDIRECT = "http://127.0.0.1:9999/callback";

function exchange(t: Awaited<ReturnType<typeof makeTestApp>>, code: string) {
  return token(t, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: REDIRECT,
  });
}

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

    const refresh = await token(t, { grant_type: "refresh_token", refresh_token });
    assert.equal(refresh.status, 400);
    assert.equal((await refresh.json()).error, "invalid_grant");
  } finally {
    t.close();
  }
});

Deno.test("REVOKE_ON_CODE_REPLAY off (default): a replay is refused and the session lives on", async () => {
  const t = await makeTestApp();
  try {
    const code = await issueCode(t);
    const { refresh_token } = await (await exchange(t, code)).json();
    assert.equal((await exchange(t, code)).status, 400);
    const refresh = await token(t, { grant_type: "refresh_token", refresh_token });
    assert.equal(refresh.status, 200);
    assert.equal((await t.kv.list({ prefix: ["code"] }).next()).done, true, "code deleted");
  } finally {
    t.close();
  }
});

Deno.test("REFRESH_GRACE_SECONDS: the previous token gets the same new pair once within the window", async () => {
  const t = await makeTestApp({ env: { REFRESH_GRACE_SECONDS: "30" } });
  try {
    const { refresh_token: old } = await issueTokens(t);
    const rotated = await (await token(t, { grant_type: "refresh_token", refresh_token: old }))
      .json();

    const retried = await token(t, { grant_type: "refresh_token", refresh_token: old });
    assert.equal(retried.status, 200);
    assert.deepEqual(await retried.json(), rotated);

    const again = await token(t, { grant_type: "refresh_token", refresh_token: old });
    assert.equal(again.status, 400, "only once");
    await again.body?.cancel();

    const next = await token(t, {
      grant_type: "refresh_token",
      refresh_token: rotated.refresh_token,
    });
    assert.equal(next.status, 200, "the new token still works");
  } finally {
    t.close();
  }
});

Deno.test("REFRESH_GRACE_SECONDS: no grace once the new token was used, nor after the window", async () => {
  const t = await makeTestApp({ env: { REFRESH_GRACE_SECONDS: "30" } });
  const refresh = (refresh_token: string) =>
    token(t, { grant_type: "refresh_token", refresh_token });
  try {
    const { refresh_token: first } = await issueTokens(t);
    const second = (await (await refresh(first)).json()).refresh_token;
    const third = (await (await refresh(second)).json()).refresh_token;
    const stale = await refresh(first);
    assert.equal((await stale.json()).error, "invalid_grant", "the session moved on");

    t.clock.advance(31_000);
    const late = await refresh(second);
    assert.equal((await late.json()).error, "invalid_grant", "the window has passed");

    const current = await refresh(third);
    assert.equal(current.status, 200, "refused retries do not break the current token");
    await current.body?.cancel();
  } finally {
    t.close();
  }
});

Deno.test("REFRESH_GRACE_SECONDS off (default): the previous token is invalid at once", async () => {
  const t = await makeTestApp();
  try {
    const { refresh_token: old } = await issueTokens(t);
    await (await token(t, { grant_type: "refresh_token", refresh_token: old })).body?.cancel();
    const retried = await token(t, { grant_type: "refresh_token", refresh_token: old });
    assert.equal((await retried.json()).error, "invalid_grant");
  } finally {
    t.close();
  }
});
