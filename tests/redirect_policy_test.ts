/**
 * REDIRECT_URI_POLICY=registered: `/authorize` accepts only registered clients and their
 * redirect URIs (loopback ports may vary, RFC 8252 §7.3), and `/token` only the client the code
 * was issued to. Under the default policy `any` the spec's behaviour is unchanged.
 */

import assert from "node:assert/strict";
import {
  authorize,
  issueCode,
  type Json,
  PKCE,
  poll,
  registerClient,
  startFlow,
  type TestApp,
  token,
  withApp,
  withEnv,
} from "./_helpers.ts";

const REGISTERED = { REDIRECT_URI_POLICY: "registered" };

async function assertAccepted(response: Response, label: string): Promise<void> {
  const text = await response.text();
  assert.equal(response.status, 200, `${label}: ${text}`);
  assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
}

async function assertRejected(
  response: Response,
  status: number,
  error: string,
  label: string,
): Promise<Json> {
  const text = await response.text();
  assert.equal(response.status, status, `${label}: ${text}`);
  assert.equal(response.headers.get("location"), null, `${label}: never redirects`);
  const body = JSON.parse(text);
  assert.equal(body.error, error, label);
  assert.equal(typeof body.error_description, "string");
  return body;
}

Deno.test("registered policy: /authorize with an unregistered client_id → 400 invalid_request, no device flow", () =>
  withEnv(REGISTERED, async (t) => {
    await assertRejected(
      await authorize(t, { client_id: "never-registered" }),
      400,
      "invalid_request",
      "unknown client",
    );
    assert.equal(t.upstream.calls.start, 0);
  }));

Deno.test("registered policy: /authorize with a redirect_uri not registered for the client → 400 invalid_request", () =>
  withEnv(REGISTERED, async (t) => {
    const clientId = await registerClient(t, ["https://app.example/cb"]);
    const other = await registerClient(t, ["https://other.example/cb"]);
    for (
      const redirect of [
        "https://app.example/cb2",
        "https://app.example/cb/",
        "https://app.example/cb?x=1",
        "https://app.example:8443/cb",
        "https://APP.example.evil/cb",
        "http://app.example/cb",
        "https://other.example/cb", // registered, but by another client
      ]
    ) {
      await assertRejected(
        await authorize(t, { client_id: clientId, redirect_uri: redirect }),
        400,
        "invalid_request",
        redirect,
      );
    }
    await assertAccepted(
      await authorize(t, { client_id: other, redirect_uri: "https://other.example/cb" }),
      "the other client's own URI",
    );
    assert.equal(t.upstream.calls.start, 1);
  }));

Deno.test("registered policy: /authorize with exactly a registered redirect_uri → page", () =>
  withEnv(REGISTERED, async (t) => {
    const uris = ["https://app.example/cb", "com.example.app:/oauth2redirect"];
    const clientId = await registerClient(t, uris);
    for (const redirect of uris) {
      await assertAccepted(
        await authorize(t, { client_id: clientId, redirect_uri: redirect }),
        redirect,
      );
    }
  }));

Deno.test("registered policy: loopback redirect URIs match on any port for 127.0.0.1, [::1] and localhost", () =>
  withEnv(REGISTERED, async (t) => {
    const clientId = await registerClient(t, [
      "http://127.0.0.1/callback",
      "http://[::1]:8080/callback",
      "http://localhost:3000/oauth/callback",
    ]);
    for (
      const redirect of [
        "http://127.0.0.1/callback",
        "http://127.0.0.1:53682/callback",
        "http://[::1]/callback",
        "http://[::1]:41999/callback",
        "http://localhost:3000/oauth/callback",
        "http://localhost:6274/oauth/callback",
      ]
    ) {
      await assertAccepted(
        await authorize(t, { client_id: clientId, redirect_uri: redirect }),
        redirect,
      );
    }
  }));

Deno.test("registered policy: loopback port freedom keeps host, path and query exact", () =>
  withEnv(REGISTERED, async (t) => {
    const clientId = await registerClient(t, ["http://127.0.0.1:8080/callback"]);
    for (
      const redirect of [
        "http://127.0.0.1:9000/other",
        "http://127.0.0.1:9000/callback?x=1",
        "http://localhost:8080/callback", // a different loopback host is a different URI
        "http://[::1]:8080/callback",
        "https://127.0.0.1:8080/callback",
      ]
    ) {
      await assertRejected(
        await authorize(t, { client_id: clientId, redirect_uri: redirect }),
        400,
        "invalid_request",
        redirect,
      );
    }
  }));

Deno.test("registered policy: non-loopback hosts get no port freedom", () =>
  withEnv(REGISTERED, async (t) => {
    const clientId = await registerClient(t, ["https://app.example/cb"]);
    await assertRejected(
      await authorize(t, { client_id: clientId, redirect_uri: "https://app.example:8443/cb" }),
      400,
      "invalid_request",
      "https with another port",
    );
    const portless = await registerClient(t, ["https://app.example:8443/cb"]);
    await assertRejected(
      await authorize(t, { client_id: portless, redirect_uri: "https://app.example/cb" }),
      400,
      "invalid_request",
      "https without the registered port",
    );
  }));

Deno.test("registered policy: the sole registered redirect URI may be omitted and is then used", () =>
  withEnv(REGISTERED, async (t) => {
    const clientId = await registerClient(t, ["https://app.example/cb"]);
    const flowState = await startFlow(t, { client_id: clientId, redirect_uri: null });
    assert.equal((await t.store.getFlow(flowState))?.value.redirectUri, "https://app.example/cb");
    t.upstream.approve();
    const body = await (await poll(t, flowState)).json();
    assert.equal(body.status, "complete");
    assert.equal(body.redirect_uri, "https://app.example/cb");
    // /authorize named none, so the exchange need not (spec: "required only if one was given
    // to /authorize"; RFC 6749 §4.1.3); one it names must be the URI the code went to.
    const exchange = (code: string, redirectUri?: string) =>
      token(t, {
        grant_type: "authorization_code",
        code,
        code_verifier: PKCE.verifier,
        ...(redirectUri === undefined ? {} : { redirect_uri: redirectUri }),
        client_id: clientId,
      });
    const leftOut = await exchange(body.code);
    assert.equal(leftOut.status, 200, await leftOut.clone().text());
    await leftOut.body?.cancel();

    const again = await startFlow(t, { client_id: clientId, redirect_uri: null });
    t.upstream.approve();
    const { code } = await (await poll(t, again)).json();
    const wrong = await exchange(code, "https://app.example/other");
    assert.equal(wrong.status, 400);
    assert.equal((await wrong.json()).error, "invalid_grant");
    const named = await exchange(code, "https://app.example/cb");
    assert.equal(named.status, 200, await named.clone().text());
    await named.body?.cancel();
  }));

Deno.test("registered policy: redirect_uri omitted with several registered → 400 invalid_request", () =>
  withEnv(REGISTERED, async (t) => {
    const clientId = await registerClient(t, ["https://app.example/a", "https://app.example/b"]);
    await assertRejected(
      await authorize(t, { client_id: clientId, redirect_uri: null }),
      400,
      "invalid_request",
      "ambiguous",
    );
  }));

Deno.test("registered policy: a loopback redirect on another port is what the flow returns to", () =>
  withEnv(REGISTERED, async (t) => {
    const clientId = await registerClient(t, ["http://127.0.0.1/callback"]);
    const redirect = "http://127.0.0.1:51234/callback";
    const flowState = await startFlow(t, { client_id: clientId, redirect_uri: redirect });
    t.upstream.approve();
    const body = await (await poll(t, flowState)).json();
    assert.equal(body.redirect_uri, redirect);
  }));

async function codeFor(t: TestApp, clientId: string, redirect: string): Promise<string> {
  return await issueCode(t, { client_id: clientId, redirect_uri: redirect });
}

function exchange(t: TestApp, code: string, redirect: string, clientId?: string) {
  return token(t, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: redirect,
    ...(clientId === undefined ? {} : { client_id: clientId }),
  });
}

Deno.test("registered policy: /token with the code's own client_id → 200", () =>
  withEnv(REGISTERED, async (t) => {
    const redirect = "http://127.0.0.1:9999/callback";
    const clientId = await registerClient(t, [redirect]);
    const response = await exchange(t, await codeFor(t, clientId, redirect), redirect, clientId);
    assert.equal(response.status, 200);
    assert.equal((await response.json()).token_type, "Bearer");
  }));

Deno.test("registered policy: /token with another registered client_id → 400 invalid_grant", () =>
  withEnv(REGISTERED, async (t) => {
    const redirect = "http://127.0.0.1:9999/callback";
    const clientId = await registerClient(t, [redirect]);
    const thief = await registerClient(t, [redirect]);
    const code = await codeFor(t, clientId, redirect);
    await assertRejected(await exchange(t, code, redirect, thief), 400, "invalid_grant", "thief");
  }));

// 401, not 400: the MCP SDK registers again only on 401 invalid_client.
Deno.test("registered policy: /token with an unknown client_id → 401 invalid_client", () =>
  withEnv(REGISTERED, async (t) => {
    const redirect = "http://127.0.0.1:9999/callback";
    const clientId = await registerClient(t, [redirect]);
    const code = await codeFor(t, clientId, redirect);
    await assertRejected(
      await exchange(t, code, redirect, "never-registered"),
      401,
      "invalid_client",
      "unknown",
    );
  }));

Deno.test("registered policy: /token without client_id → 400 invalid_request", () =>
  withEnv(REGISTERED, async (t) => {
    const redirect = "http://127.0.0.1:9999/callback";
    const clientId = await registerClient(t, [redirect]);
    const code = await codeFor(t, clientId, redirect);
    await assertRejected(await exchange(t, code, redirect), 400, "invalid_request", "missing");
    // A refused attempt does not spend the code.
    const response = await exchange(t, code, redirect, clientId);
    assert.equal(response.status, 200);
    await response.body?.cancel();
  }));

Deno.test("default policy any: unregistered clients and any redirect URI are accepted", () =>
  withApp(async (t) => {
    assert.equal(t.config.redirectUriPolicy, "any");
    for (
      const redirect of [
        "http://127.0.0.1:9999/callback",
        "https://anything.example/cb",
        "http://127.0.0.1:1/elsewhere",
      ]
    ) {
      await assertAccepted(
        await authorize(t, { client_id: "never-registered", redirect_uri: redirect }),
        redirect,
      );
    }
    const clientId = await registerClient(t, ["https://app.example/cb"]);
    await assertAccepted(
      await authorize(t, {
        client_id: clientId,
        redirect_uri: "https://not-registered.example/cb",
      }),
      "registered client, other URI",
    );
    // Omitted stays omitted: nothing to return to (spec behaviour), even with one registered.
    const flowState = await startFlow(t, { client_id: clientId, redirect_uri: null });
    assert.equal((await t.store.getFlow(flowState))?.value.redirectUri, undefined);
  }));

Deno.test("default policy any: /token checks no client_id (absent, unknown or different all work)", () =>
  withApp(async (t) => {
    const redirect = "http://127.0.0.1:9999/callback";
    for (const clientId of [undefined, "never-registered", "someone-else"]) {
      const code = await issueCode(t, { client_id: "client-1", redirect_uri: redirect });
      const response = await exchange(t, code, redirect, clientId);
      assert.equal(response.status, 200, String(clientId));
      await response.body?.cancel();
    }
  }));
