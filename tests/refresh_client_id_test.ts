/**
 * Issue 22 §1.3: under REDIRECT_URI_POLICY=registered (and so SECURITY_PROFILE=strict) the
 * refresh grant requires `client_id`; another client's gets 400 invalid_grant, an unknown one 401
 * invalid_client, so an MCP client registers again. A refused refresh spends nothing and costs no
 * GitLab call. The default policy keeps the spec's "no client_id is checked" (token_test 4.3.2).
 */

import assert from "node:assert/strict";
import { issueCode, PKCE, refresh, TEST_BASE, type TestApp, token, withEnv } from "./_helpers.ts";

const REDIRECT = "http://127.0.0.1:9999/callback";

async function registerClient(t: TestApp): Promise<string> {
  const response = await t.app(
    new Request(`${TEST_BASE}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ redirect_uris: [REDIRECT], client_name: "Refresh Test" }),
    }),
  );
  assert.equal(response.status, 201);
  return (await response.json()).client_id;
}

async function refreshTokenFor(t: TestApp, clientId: string): Promise<string> {
  const code = await issueCode(t, { client_id: clientId, redirect_uri: REDIRECT });
  const response = await token(t, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: REDIRECT,
    client_id: clientId,
  });
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()).refresh_token;
}

async function assertError(response: Response, status: number, error: string, label: string) {
  const text = await response.text();
  assert.equal(response.status, status, `${label}: ${text}`);
  assert.equal(JSON.parse(text).error, error, label);
}

Deno.test("refresh, registered policy: client_id required, unknown → 401 invalid_client, other → invalid_grant", () =>
  withEnv({ REDIRECT_URI_POLICY: "registered" }, async (t) => {
    const mine = await registerClient(t);
    const other = await registerClient(t);
    const refreshToken = await refreshTokenFor(t, mine);

    await assertError(await refresh(t, refreshToken), 400, "invalid_request", "missing");
    await assertError(
      await refresh(t, refreshToken, { client_id: "never-registered" }),
      401,
      "invalid_client",
      "unknown",
    );
    await assertError(
      await refresh(t, refreshToken, { client_id: other }),
      400,
      "invalid_grant",
      "other",
    );

    const own = await refresh(t, refreshToken, { client_id: mine });
    assert.equal(own.status, 200, "refused attempts did not spend the token");
    await own.body?.cancel();
  }));

Deno.test("refresh, registered policy: a retry within REFRESH_GRACE_SECONDS is checked as the first request was (client_id, resource) before the grace answers", () =>
  withEnv({ REDIRECT_URI_POLICY: "registered", REFRESH_GRACE_SECONDS: "30" }, async (t) => {
    const mine = await registerClient(t);
    const other = await registerClient(t);
    const old = await refreshTokenFor(t, mine);
    const rotated = await refresh(t, old, { client_id: mine });
    assert.equal(rotated.status, 200, await rotated.clone().text());
    const pair = await rotated.json();

    await assertError(await refresh(t, old), 400, "invalid_request", "missing");
    await assertError(await refresh(t, old, { client_id: other }), 400, "invalid_grant", "other");
    await assertError(
      await refresh(t, old, { client_id: mine, resource: "https://elsewhere.example/mcp" }),
      400,
      "invalid_target",
      "resource",
    );
    const retried = await refresh(t, old, { client_id: mine });
    assert.equal(retried.status, 200, "the refused retries did not take the grace");
    assert.deepEqual(await retried.json(), pair);
  }));
