/**
 * `GET /authorize` against spec §4.1 (and the flow record of §2.1): every check in its order,
 * the upstream start failure, and the success page.
 */

import assert from "node:assert/strict";
import type { Store } from "../src/store/mod.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { recordsOf } from "../src/store/keys.ts";
import { escapeHtml } from "../src/pages/mod.ts";
import {
  assertError,
  authorize,
  exchange,
  flowDataFromPage,
  PKCE,
  poll,
  TEST_BASE,
  TEST_REDIRECT as REDIRECT,
  type TestApp,
  withApp,
} from "./_helpers.ts";

function authorizeRaw(t: TestApp, query: string): Promise<Response> {
  return t.app(new Request(`${TEST_BASE}/authorize?${query}`));
}

/** The `<a …>` element whose href is `url` (HTML-escaped), or null. */
function linkTo(html: string, url: string): string | null {
  const href = `href="${escapeHtml(url)}"`;
  const tags = html.match(/<a\b[^>]*>/g) ?? [];
  return tags.find((tag) => tag.includes(href)) ?? null;
}

async function completeFlow(t: TestApp, flowState: string): Promise<Record<string, unknown>> {
  t.upstream.approve();
  const response = await poll(t, flowState);
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.equal(body.status, "complete", JSON.stringify(body));
  return body;
}

// ---- checks, in order ------------------------------------------------------------------------

Deno.test("4.1 check 1: OAuth configuration missing → 500 server_error 'OAuth not configured'", () =>
  withApp(async (t) => {
    const before = await recordsOf(t.kv);
    await assertError(await authorize(t), 500, "server_error", "OAuth not configured");
    assert.equal(t.upstream.calls.start, 0);
    assert.deepEqual(await recordsOf(t.kv), before);
  }, { configured: false }));

Deno.test("4.1 check 2: response_type is not code → 400 unsupported_response_type", () =>
  withApp(async (t) => {
    for (const responseType of ["token", "", "CODE", "code token", null]) {
      await assertError(
        await authorize(t, { response_type: responseType }),
        400,
        "unsupported_response_type",
      );
    }
    assert.equal(t.upstream.calls.start, 0);
    assert.deepEqual(await recordsOf(t.kv), []);
  }));

Deno.test("4.1 check 3: client_id missing → 400 invalid_request", () =>
  withApp(async (t) => {
    for (const clientId of [null, ""]) {
      await assertError(
        await authorize(t, { client_id: clientId }),
        400,
        "invalid_request",
        /client_id/,
      );
    }
    assert.equal(t.upstream.calls.start, 0);
    assert.deepEqual(await recordsOf(t.kv), []);
  }));

Deno.test("4.1 check 4: code_challenge missing → 400 invalid_request", () =>
  withApp(async (t) => {
    for (const challenge of [null, ""]) {
      await assertError(
        await authorize(t, { code_challenge: challenge }),
        400,
        "invalid_request",
        /code_challenge/,
      );
    }
    assert.equal(t.upstream.calls.start, 0);
    assert.deepEqual(await recordsOf(t.kv), []);
  }));

Deno.test("4.1 check 5: code_challenge_method is not S256 → 400 invalid_request", () =>
  withApp(async (t) => {
    for (const method of ["plain", "s256", "", "S512", null]) {
      await assertError(
        await authorize(t, { code_challenge_method: method }),
        400,
        "invalid_request",
        /code_challenge_method/,
      );
    }
    assert.equal(t.upstream.calls.start, 0);
    assert.deepEqual(await recordsOf(t.kv), []);
  }));

Deno.test("4.1 check 6: upstream device-flow start fails → 500 server_error 'Failed to initiate authentication'", () =>
  withApp(async (t) => {
    for (
      const error of [
        new UpstreamError("transient", "timeout", "GitLab did not answer in time"),
        new UpstreamError("terminal", "invalid_client", "Client authentication failed"),
      ]
    ) {
      t.upstream.startResult = error;
      await assertError(
        await authorize(t),
        500,
        "server_error",
        "Failed to initiate authentication",
      );
    }
    assert.equal(t.upstream.calls.start, 2);
    assert.deepEqual(await recordsOf(t.kv), [], "no flow record stored");
  }));

Deno.test("4.1 check 6: storing the device flow record fails → 500 server_error 'Failed to initiate authentication'", () =>
  withApp(async (t) => {
    const failing: Store = {
      ...t.store,
      createFlow: () => Promise.reject(new Error("kv unavailable")),
    };
    t.deps.store = failing;
    await assertError(await authorize(t), 500, "server_error", "Failed to initiate authentication");
    assert.equal(t.upstream.calls.start, 1);
    assert.deepEqual(await recordsOf(t.kv), []);
  }));

Deno.test("4.1 check order: configuration missing beats bad response_type", () =>
  withApp(async (t) => {
    await assertError(
      await authorize(t, { response_type: "token", client_id: null, code_challenge: null }),
      500,
      "server_error",
      "OAuth not configured",
    );
  }, { configured: false }));

Deno.test("4.1 check order: bad response_type beats missing client_id", () =>
  withApp(async (t) => {
    await assertError(
      await authorize(t, {
        response_type: "token",
        client_id: null,
        code_challenge: null,
        code_challenge_method: "plain",
      }),
      400,
      "unsupported_response_type",
    );
  }));

Deno.test("4.1 check order: missing client_id beats missing code_challenge", () =>
  withApp(async (t) => {
    await assertError(
      await authorize(t, { client_id: null, code_challenge: null, code_challenge_method: "plain" }),
      400,
      "invalid_request",
      /client_id/,
    );
  }));

Deno.test("4.1 check order: missing code_challenge beats bad code_challenge_method", () =>
  withApp(async (t) => {
    const body = await assertError(
      await authorize(t, { code_challenge: null, code_challenge_method: "plain" }),
      400,
      "invalid_request",
      /code_challenge/,
    );
    assert.doesNotMatch(body.error_description, /code_challenge_method/);
  }));

Deno.test("4.1 check order: bad code_challenge_method beats upstream failure (upstream not called)", () =>
  withApp(async (t) => {
    t.upstream.startResult = new UpstreamError("transient", "network", "connection refused");
    await assertError(
      await authorize(t, { code_challenge_method: "plain" }),
      400,
      "invalid_request",
      /code_challenge_method/,
    );
    assert.equal(t.upstream.calls.start, 0);
  }));

// ---- success ---------------------------------------------------------------------------------

Deno.test("4.1 success: 200 text/html page showing the user code", () =>
  withApp(async (t) => {
    const response = await authorize(t);
    const html = await response.text();
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
    assert.ok(html.includes(t.upstream.device.userCode), "page shows the user code");
    assert.equal(t.upstream.calls.start, 1);
  }));

Deno.test("4.1 success: page links verificationUriComplete, opened in a new tab", () =>
  withApp(async (t) => {
    const html = await (await authorize(t)).text();
    const link = linkTo(html, t.upstream.device.verificationUriComplete!);
    assert.ok(link, "a link to verification_uri_complete");
    assert.match(link, /target="_blank"/);
    assert.equal(linkTo(html, t.upstream.device.verificationUri), null);
  }));

Deno.test("4.1 success: page links verificationUri when verificationUriComplete is absent", () =>
  withApp(async (t) => {
    t.upstream.device = { ...t.upstream.device, verificationUriComplete: undefined };
    const response = await authorize(t);
    assert.equal(response.status, 200);
    const html = await response.text();
    const link = linkTo(html, t.upstream.device.verificationUri);
    assert.ok(link, "a link to verification_uri");
    assert.match(link, /target="_blank"/);
  }));

Deno.test("4.1 success: page polls {base_url}/oauth/poll and counts down the upstream expires_in", () =>
  withApp(async (t) => {
    t.upstream.device = { ...t.upstream.device, expiresInSeconds: 600 };
    const data = flowDataFromPage(await (await authorize(t)).text());
    assert.equal(data.pollUrl, `${TEST_BASE}/oauth/poll`);
    assert.equal(data.expiresInSeconds, 600);
    assert.equal(typeof data.flowState, "string");
    assert.ok(data.flowState.length > 0);
  }));

Deno.test("4.1 success / 2.1: device flow record stored under flow_state with the request's fields", () =>
  withApp(async (t) => {
    const now = t.clock.now();
    const data = flowDataFromPage(await (await authorize(t)).text());
    const flow = await t.store.getFlow(data.flowState);
    assert.ok(flow, "flow stored");
    const device = t.upstream.device;
    assert.equal(flow.value.deviceCode, device.deviceCode);
    assert.equal(flow.value.userCode, device.userCode);
    assert.equal(flow.value.verificationUri, device.verificationUri);
    assert.equal(flow.value.verificationUriComplete, device.verificationUriComplete);
    assert.equal(flow.value.expiresAt, now + device.expiresInSeconds * 1000);
    assert.equal(flow.value.intervalSeconds, device.intervalSeconds);
    assert.equal(flow.value.clientId, "client-1");
    assert.equal(flow.value.codeChallenge, PKCE.challenge);
    assert.equal(flow.value.codeChallengeMethod, "S256");
    assert.equal(flow.value.state, "xyz");
    assert.equal(flow.value.redirectUri, REDIRECT);
    // …and the page's poll finds it.
    const response = await poll(t, data.flowState);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { status: "pending" });
  }));

Deno.test("4.1 success: every distinct request starts its own flow with a distinct flow_state", () =>
  withApp(async (t) => {
    const a = flowDataFromPage(await (await authorize(t)).text()).flowState;
    // A different state is a different request (an identical one shares the flow, see
    // repeat_authorize_test.ts).
    const b = flowDataFromPage(await (await authorize(t, { state: "other" })).text()).flowState;
    assert.notEqual(a, b);
    assert.equal(t.upstream.calls.start, 2);
    assert.ok(await t.store.getFlow(a));
    assert.ok(await t.store.getFlow(b));
  }));

Deno.test("4.1 success: scope accepted and ignored (granted scopes stay mcp:tools mcp:resources)", () =>
  withApp(async (t) => {
    const response = await authorize(t, { scope: "admin openid mcp:everything" });
    assert.equal(response.status, 200);
    const { flowState } = flowDataFromPage(await response.text());
    const done = await completeFlow(t, flowState);
    const exchanged = await exchange(t, String(done.code));
    assert.equal(exchanged.status, 200);
    assert.equal((await exchanged.json()).scope, "mcp:tools mcp:resources");
  }));

Deno.test("4.1 success: state absent → poll complete has no state", () =>
  withApp(async (t) => {
    const response = await authorize(t, { state: null });
    assert.equal(response.status, 200);
    const { flowState } = flowDataFromPage(await response.text());
    assert.equal((await t.store.getFlow(flowState))?.value.state, "");
    const done = await completeFlow(t, flowState);
    assert.equal(Object.hasOwn(done, "state"), false);
    assert.deepEqual(Object.keys(done).sort(), ["code", "redirect_uri", "status"]);
  }));

Deno.test("4.1 success: state echoed back unchanged on completion", () =>
  withApp(async (t) => {
    const state = "a b&c=d/é?%20<x>";
    const response = await authorize(t, { state });
    assert.equal(response.status, 200);
    const { flowState } = flowDataFromPage(await response.text());
    const done = await completeFlow(t, flowState);
    assert.equal(done.state, state);
  }));

Deno.test("4.1 success: redirect_uri is stored and not validated by this operation", () =>
  withApp(async (t) => {
    const redirectUri = "myapp:/callback?x=1";
    const response = await authorize(t, { redirect_uri: redirectUri });
    assert.equal(response.status, 200);
    const { flowState } = flowDataFromPage(await response.text());
    const done = await completeFlow(t, flowState);
    assert.equal(done.redirect_uri, redirectUri);
  }));

Deno.test("4.1 success: redirect_uri absent → accepted, nothing to return to", () =>
  withApp(async (t) => {
    const response = await authorizeRaw(
      t,
      new URLSearchParams({
        response_type: "code",
        client_id: "client-1",
        code_challenge: PKCE.challenge,
        code_challenge_method: "S256",
      }).toString(),
    );
    assert.equal(response.status, 200);
    const { flowState } = flowDataFromPage(await response.text());
    assert.equal((await t.store.getFlow(flowState))?.value.redirectUri, undefined);
    const done = await completeFlow(t, flowState);
    assert.deepEqual(Object.keys(done).sort(), ["code", "status"]);
  }));
