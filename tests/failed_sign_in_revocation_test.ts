/**
 * Issue 22 §1.13: when a sign-in fails after GitLab issued a token (the user lookup fails), that
 * token is revoked at GitLab: no session holds it, so nothing else ever would. A transient
 * failure of the device flow keeps it, for the next poll to use.
 */

import assert from "node:assert/strict";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  authorizeQuery,
  consentFormOf,
  CookieJar,
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
