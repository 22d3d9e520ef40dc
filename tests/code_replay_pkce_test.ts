/**
 * Issue 22 §1.12: REVOKE_ON_CODE_REPLAY ends the session only when the replay also passes PKCE.
 * Whoever merely saw a used code cannot end the session with it; the answer is the same
 * `invalid_grant` either way.
 */

import assert from "node:assert/strict";
import { exchange, issueCode, refresh, withApp } from "./_helpers.ts";

Deno.test("REVOKE_ON_CODE_REPLAY=true: a replay with a wrong verifier is refused and ends nothing", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const first = await exchange(t, code);
    assert.equal(first.status, 200);
    const { refresh_token } = await first.json();

    const wrongVerifier = "w".repeat(43);
    const replay = await exchange(t, code, { code_verifier: wrongVerifier });
    assert.equal(replay.status, 400);
    assert.deepEqual(await replay.json(), {
      error: "invalid_grant",
      error_description: "Invalid authorization code",
    });
    assert.deepEqual(t.upstream.revokedTokens, [], "the GitLab token stays");
    const refreshed = await refresh(t, refresh_token);
    assert.equal(refreshed.status, 200, "the session lives on");
    await refreshed.body?.cancel();

    // The same replay with the right verifier still ends it.
    const proven = await exchange(t, code);
    assert.equal((await proven.json()).error, "invalid_grant");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
  }, { env: { REVOKE_ON_CODE_REPLAY: "true" } }));
