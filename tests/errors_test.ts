/**
 * The error table of spec §7, and bad input on every endpoint: each answers a JSON error (the
 * poll body on `/oauth/poll`), never a 500, and writes nothing to KV.
 */

import assert from "node:assert/strict";
import { UpstreamError } from "../src/upstream/types.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  assertError,
  authorizeQuery,
  exchange,
  issueCode,
  issueTokens,
  type Json,
  PKCE,
  poll,
  refresh,
  startFlow,
  TEST_BASE,
  TEST_REDIRECT as REDIRECT,
  type TestApp,
  token,
  withApp,
} from "./_helpers.ts";

const MAX_BODY = 64 * 1024;

/** Runs `request` and asserts that KV is exactly as before it. */
async function withoutWrites(t: TestApp, request: () => Promise<Response>): Promise<Response> {
  const before = await recordsOf(t.kv);
  const response = await request();
  assert.deepEqual(await recordsOf(t.kv), before, "nothing written to KV");
  return response;
}

/** Live state for bad requests to leave alone: tokens, an unredeemed code and a pending flow. */
async function seed(t: TestApp) {
  const tokens = await issueTokens(t);
  const code = await issueCode(t);
  const flowState = await startFlow(t);
  return { refreshToken: tokens.refresh_token, code, flowState };
}

async function pollBody(response: Response): Promise<{ status: number; body: Json }> {
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  return { status: response.status, body: await response.json() };
}

function get(t: TestApp, pathAndQuery: string, init: RequestInit = {}): Promise<Response> {
  return t.app(new Request(`${TEST_BASE}${pathAndQuery}`, init));
}

function postToken(
  t: TestApp,
  body: BodyInit | null,
  headers: Record<string, string> = {},
): Promise<Response> {
  return t.app(new Request(`${TEST_BASE}/token`, { method: "POST", headers, body }));
}

const FORM = { "Content-Type": "application/x-www-form-urlencoded" };
const JSON_TYPE = { "Content-Type": "application/json" };

// ---- §7 error table --------------------------------------------------------------------------

Deno.test("7: 500 server_error on /authorize when configuration missing → 'OAuth not configured'", () =>
  withApp(async (t) => {
    await assertError(
      await withoutWrites(t, () => get(t, `/authorize?${authorizeQuery()}`)),
      500,
      "server_error",
      "OAuth not configured",
    );
  }, { configured: false }));

Deno.test("7: 500 server_error on /token when configuration missing → 'OAuth not configured'", () =>
  withApp(async (t) => {
    for (
      const form of [
        { grant_type: "authorization_code", code: "c", code_verifier: PKCE.verifier },
        { grant_type: "refresh_token", refresh_token: "r" },
        {},
      ] as Record<string, string>[]
    ) {
      await assertError(
        await withoutWrites(t, () => token(t, form)),
        500,
        "server_error",
        "OAuth not configured",
      );
    }
  }, { configured: false }));

Deno.test("7: 500 server_error on /oauth/poll when configuration missing → body only {error: server_error}", () =>
  withApp(async (t) => {
    for (const query of ["?flow_state=abc", "", "?flow_state=a&flow_state=b"]) {
      const { status, body } = await pollBody(
        await withoutWrites(t, () => get(t, `/oauth/poll${query}`)),
      );
      assert.equal(status, 500);
      assert.deepEqual(body, { error: "server_error" });
    }
  }, { configured: false }));

Deno.test("7: configuration missing beats bad input on every endpoint", () =>
  withApp(async (t) => {
    await assertError(
      await get(t, "/authorize?response_type=token&response_type=code"),
      500,
      "server_error",
      "OAuth not configured",
    );
    await assertError(
      await postToken(t, "{not json", JSON_TYPE),
      500,
      "server_error",
      "OAuth not configured",
    );
    await assertError(
      await postToken(t, "x", { "Content-Type": "text/plain" }),
      500,
      "server_error",
      "OAuth not configured",
    );
    assert.deepEqual(await recordsOf(t.kv), []);
  }, { configured: false }));

Deno.test("7: 500 server_error on /authorize when the upstream device-flow start failed → 'Failed to initiate authentication'", () =>
  withApp(async (t) => {
    t.upstream.startResult = new UpstreamError("transient", "http_503", "GitLab answered 503");
    await assertError(
      await withoutWrites(t, () => get(t, `/authorize?${authorizeQuery()}`)),
      500,
      "server_error",
      "Failed to initiate authentication",
    );
  }));

Deno.test("7: 400 unsupported_response_type on /authorize when response_type is not code", () =>
  withApp(async (t) => {
    for (const responseType of ["token", "id_token", null]) {
      await assertError(
        await withoutWrites(
          t,
          () => get(t, `/authorize?${authorizeQuery({ response_type: responseType })}`),
        ),
        400,
        "unsupported_response_type",
      );
    }
  }));

Deno.test("7: 400 invalid_request on /authorize: missing client_id, missing code_challenge, or method not S256", () =>
  withApp(async (t) => {
    for (
      const overrides of [
        { client_id: null },
        { code_challenge: null },
        { code_challenge_method: "plain" },
        { code_challenge_method: null },
      ] as Record<string, string | null>[]
    ) {
      await assertError(
        await withoutWrites(t, () => get(t, `/authorize?${authorizeQuery(overrides)}`)),
        400,
        "invalid_request",
      );
    }
    assert.equal(t.upstream.calls.start, 0);
  }));

Deno.test("7: 400 unsupported_grant_type on /token when grant_type is not one of the two supported values", () =>
  withApp(async (t) => {
    await seed(t);
    for (
      const form of [
        { grant_type: "password", username: "u", password: "p" },
        { grant_type: "client_credentials" },
        // The device_code grant is served since issue 36 (its own tests hold that it is
        // unsupported when DEVICE_AUTHORIZATION=off).
        {},
      ] as Record<string, string>[]
    ) {
      await assertError(
        await withoutWrites(t, () => token(t, form)),
        400,
        "unsupported_grant_type",
        /not supported/,
      );
    }
  }));

Deno.test("error_description holds only what RFC 6749 §5.2 allows, however odd the value it quotes", () =>
  withApp(async (t) => {
    const response = await token(t, { grant_type: 'été"\\x\u0007\u2028' });
    const body = await assertError(response, 400, "unsupported_grant_type");
    assert.equal(body.error_description, "Grant type ?t?'/x?? is not supported");
    assert.match(String(body.error_description), /^[\x20-\x21\x23-\x5B\x5D-\x7E]*$/);
  }));

Deno.test("7: 400 invalid_request on /token: missing code, code_verifier or refresh_token", () =>
  withApp(async (t) => {
    const { code } = await seed(t);
    for (
      const form of [
        { grant_type: "authorization_code", code_verifier: PKCE.verifier },
        { grant_type: "authorization_code", code },
        { grant_type: "refresh_token" },
      ] as Record<string, string>[]
    ) {
      await assertError(await withoutWrites(t, () => token(t, form)), 400, "invalid_request");
    }
  }));

Deno.test("7: 400 invalid_grant on /token: unknown/expired code, wrong verifier, redirect_uri mismatch, session missing, unknown refresh token, upstream refresh failure", () =>
  withApp(async (t) => {
    const { refreshToken } = await seed(t);

    await assertError(await exchange(t, "unknown-code"), 400, "invalid_grant");

    const wrong = await issueCode(t);
    await assertError(await exchange(t, wrong, { code_verifier: "nope" }), 400, "invalid_grant");
    await assertError(
      await exchange(t, wrong, { redirect_uri: "http://evil.test/cb" }),
      400,
      "invalid_grant",
    );

    const orphan = await issueCode(t);
    await t.store.deleteSession((await t.store.getCode(orphan))!.value.sessionId);
    await assertError(await exchange(t, orphan), 400, "invalid_grant");

    await assertError(await refresh(t, "unknown"), 400, "invalid_grant");

    const expired = await issueCode(t);
    t.clock.advance(10 * 60 * 1000 + 1);
    await assertError(await exchange(t, expired), 400, "invalid_grant");

    // The session's GitLab token (7200 s) is now well inside its lifetime; push it to expiry.
    t.clock.advance(7200 * 1000);
    t.upstream.refreshes.push(new UpstreamError("terminal", "invalid_grant", "revoked"));
    await assertError(
      await refresh(t, refreshToken),
      400,
      "invalid_grant",
      "Failed to refresh underlying upstream token",
    );
  }));

Deno.test("7: 400 poll body failed on /oauth/poll when flow_state missing", () =>
  withApp(async (t) => {
    await seed(t);
    const { status, body } = await pollBody(await withoutWrites(t, () => get(t, "/oauth/poll")));
    assert.equal(status, 400);
    assert.deepEqual(body, { status: "failed", error: "Missing flow_state" });
  }));

Deno.test("7: 400 poll body expired on /oauth/poll: unknown flow or device code expired", () =>
  withApp(async (t) => {
    const { flowState } = await seed(t);
    const unknown = await pollBody(await withoutWrites(t, () => poll(t, "unknown")));
    assert.equal(unknown.status, 400);
    assert.deepEqual(unknown.body, { status: "expired", error: "Flow not found" });
    t.clock.advance(301 * 1000);
    const expired = await pollBody(await poll(t, flowState));
    assert.equal(expired.status, 400);
    assert.deepEqual(expired.body, { status: "expired", error: "Device code expired" });
  }));

Deno.test("7: 200 poll body failed on /oauth/poll on a terminal upstream error", () =>
  withApp(async (t) => {
    const flowState = await startFlow(t);
    t.upstream.polls.push(
      new UpstreamError("terminal", "access_denied", "The user denied the request"),
    );
    const { status, body } = await pollBody(await poll(t, flowState));
    assert.equal(status, 200);
    assert.deepEqual(body, { status: "failed", error: "The user denied the request" });
  }));

// ---- bad input: /token -----------------------------------------------------------------------

Deno.test("bad input /token: malformed JSON → 400 invalid_request, nothing written", () =>
  withApp(async (t) => {
    await seed(t);
    for (const text of ["{", '{"grant_type": "refresh_token",}', "", "undefined", "{'a':1}"]) {
      await assertError(
        await withoutWrites(t, () => postToken(t, text, JSON_TYPE)),
        400,
        "invalid_request",
      );
    }
  }));

Deno.test("bad input /token: JSON array or non-object → 400 invalid_request, nothing written", () =>
  withApp(async (t) => {
    const { refreshToken } = await seed(t);
    for (
      const value of [
        [{ grant_type: "refresh_token", refresh_token: refreshToken }],
        [],
        "refresh_token",
        42,
        true,
        null,
      ]
    ) {
      await assertError(
        await withoutWrites(t, () => postToken(t, JSON.stringify(value), JSON_TYPE)),
        400,
        "invalid_request",
      );
    }
  }));

Deno.test("bad input /token: JSON non-string values → 400 invalid_request, nothing written", () =>
  withApp(async (t) => {
    const { refreshToken, code } = await seed(t);
    for (
      const value of [
        { grant_type: ["refresh_token"], refresh_token: refreshToken },
        { grant_type: "refresh_token", refresh_token: [refreshToken] },
        { grant_type: "refresh_token", refresh_token: { value: refreshToken } },
        { grant_type: "authorization_code", code, code_verifier: 12345 },
        { grant_type: "authorization_code", code, code_verifier: PKCE.verifier, redirect_uri: 1 },
        { grant_type: true },
      ]
    ) {
      await assertError(
        await withoutWrites(t, () => postToken(t, JSON.stringify(value), JSON_TYPE)),
        400,
        "invalid_request",
      );
    }
  }));

Deno.test("bad input /token: wrong or missing content type → 400 invalid_request, nothing written", () =>
  withApp(async (t) => {
    const { code } = await seed(t);
    const form = new URLSearchParams({
      grant_type: "authorization_code",
      code,
      code_verifier: PKCE.verifier,
      redirect_uri: REDIRECT,
    }).toString();
    for (
      const type of [
        "text/plain",
        "application/xml",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "application/x-www-form-urlencoded-x",
      ]
    ) {
      await assertError(
        await withoutWrites(t, () => postToken(t, form, { "Content-Type": type })),
        400,
        "invalid_request",
        /Content-Type/,
      );
    }
    const untyped = new Request(`${TEST_BASE}/token`, {
      method: "POST",
      body: new TextEncoder().encode(form),
    });
    assert.equal(untyped.headers.get("content-type"), null);
    await assertError(await withoutWrites(t, () => t.app(untyped)), 400, "invalid_request");
    const formData = new FormData();
    formData.set("grant_type", "authorization_code");
    formData.set("code", code);
    formData.set("code_verifier", PKCE.verifier);
    formData.set("redirect_uri", REDIRECT);
    await assertError(
      await withoutWrites(
        t,
        () => t.app(new Request(`${TEST_BASE}/token`, { method: "POST", body: formData })),
      ),
      400,
      "invalid_request",
    );
    assert.ok(await t.store.getCode(code), "the code survived");
  }));

Deno.test("bad input /token: body over 64 KiB → 413, nothing written", () =>
  withApp(async (t) => {
    const { refreshToken } = await seed(t);
    const padding = "a".repeat(MAX_BODY);
    const form = `grant_type=refresh_token&refresh_token=${refreshToken}&pad=${padding}`;
    await assertError(await withoutWrites(t, () => postToken(t, form, FORM)), 413);
    const json = JSON.stringify({
      grant_type: "refresh_token",
      refresh_token: refreshToken,
      pad: padding,
    });
    await assertError(await withoutWrites(t, () => postToken(t, json, JSON_TYPE)), 413);

    // Streamed without a Content-Length.
    const chunk = new TextEncoder().encode("a".repeat(16 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 6) controller.enqueue(chunk);
        else controller.close();
      },
    });
    await assertError(await withoutWrites(t, () => postToken(t, stream, FORM)), 413);

    // A declared Content-Length over the limit is refused before reading.
    await assertError(
      await withoutWrites(
        t,
        () => postToken(t, "grant_type=refresh_token", { ...FORM, "Content-Length": "70000" }),
      ),
      413,
    );
  }));

Deno.test("bad input /token: body of exactly 64 KiB is read (not 413)", () =>
  withApp(async (t) => {
    await seed(t);
    const prefix = "grant_type=password&pad=";
    const form = prefix + "a".repeat(MAX_BODY - prefix.length);
    assert.equal(form.length, MAX_BODY);
    await assertError(
      await withoutWrites(t, () => postToken(t, form, FORM)),
      400,
      "unsupported_grant_type",
    );
  }));

Deno.test("bad input /token: repeated members of a JSON body → 400 invalid_request as in a form, nothing written", () =>
  withApp(async (t) => {
    const { refreshToken, code } = await seed(t);
    const rt = JSON.stringify(refreshToken);
    const bodies = [
      `{"grant_type":"refresh_token","grant_type":"authorization_code","refresh_token":${rt}}`,
      `{"grant_type":"refresh_token","refresh_token":"old","refresh_token":${rt}}`,
      // The same name spelled with an escape is the same member.
      `{"grant_type":"refresh_token","refresh_token":${rt},"refresh\\u005ftoken":${rt}}`,
      `{"grant_type":"authorization_code","code":${JSON.stringify(code)},"code":"x",` +
      `"code_verifier":${JSON.stringify(PKCE.verifier)}}`,
    ];
    for (const body of bodies) {
      await assertError(
        await withoutWrites(t, () => postToken(t, body, JSON_TYPE)),
        400,
        "invalid_request",
        /Repeated parameter/,
      );
    }
    // Names and values that only look alike (a value holding `"name":`) are no repetition.
    const lookalike = `{"grant_type":"refresh_token","refresh_token":${rt},` +
      `"state":"\\"refresh_token\\": 1, \\"grant_type\\":"}`;
    const refreshed = await postToken(t, lookalike, JSON_TYPE);
    assert.equal(refreshed.status, 200, await refreshed.clone().text());
    await refreshed.body?.cancel();
    assert.ok(await t.store.getCode(code), "the code survived");
  }));

Deno.test("bad input /token: repeated parameters → 400 invalid_request, nothing written", () =>
  withApp(async (t) => {
    const { refreshToken, code } = await seed(t);
    const bodies = [
      `grant_type=refresh_token&grant_type=refresh_token&refresh_token=${refreshToken}`,
      `grant_type=refresh_token&refresh_token=${refreshToken}&refresh_token=${refreshToken}`,
      `grant_type=authorization_code&code=${code}&code=${code}&code_verifier=${PKCE.verifier}` +
      `&redirect_uri=${encodeURIComponent(REDIRECT)}`,
      `grant_type=authorization_code&code=${code}&code_verifier=${PKCE.verifier}` +
      `&code_verifier=${PKCE.verifier}&redirect_uri=${encodeURIComponent(REDIRECT)}`,
      `grant_type=authorization_code&code=${code}&code_verifier=${PKCE.verifier}` +
      `&redirect_uri=${encodeURIComponent(REDIRECT)}&redirect_uri=${encodeURIComponent(REDIRECT)}`,
    ];
    for (const body of bodies) {
      await assertError(
        await withoutWrites(t, () => postToken(t, body, FORM)),
        400,
        "invalid_request",
        /Repeated parameter/,
      );
    }
    assert.ok(await t.store.getCode(code), "the code survived");
  }));

Deno.test("bad input /token: body that is not UTF-8 → 400 invalid_request, nothing written", () =>
  withApp(async (t) => {
    await seed(t);
    const bytes = new Uint8Array([
      ...new TextEncoder().encode("grant_type=refresh_token&x="),
      0xff,
    ]);
    await assertError(await withoutWrites(t, () => postToken(t, bytes, FORM)), 400);
    await assertError(await withoutWrites(t, () => postToken(t, bytes, JSON_TYPE)), 400);
  }));

// ---- bad input: /authorize -------------------------------------------------------------------

Deno.test("bad input /authorize: repeated parameters → 400 invalid_request, upstream not called, nothing written", () =>
  withApp(async (t) => {
    await seed(t);
    const starts = t.upstream.calls.start;
    const base = authorizeQuery();
    for (
      const extra of [
        "response_type=code",
        "client_id=client-2",
        `code_challenge=${PKCE.challenge}`,
        "code_challenge_method=S256",
        `redirect_uri=${encodeURIComponent(REDIRECT)}`,
        "state=other",
      ]
    ) {
      await assertError(
        await withoutWrites(t, () => get(t, `/authorize?${base}&${extra}`)),
        400,
        "invalid_request",
        /Repeated parameter/,
      );
    }
    assert.equal(t.upstream.calls.start, starts);
  }));

// ---- bad input: /oauth/poll ------------------------------------------------------------------

Deno.test("bad input /oauth/poll: repeated flow_state → 400 failed body, nothing written", () =>
  withApp(async (t) => {
    const { flowState } = await seed(t);
    const polls = t.upstream.calls.poll;
    t.upstream.approve();
    const q = encodeURIComponent(flowState);
    for (const query of [`flow_state=${q}&flow_state=${q}`, `flow_state=${q}&flow_state=other`]) {
      const { status, body } = await pollBody(
        await withoutWrites(t, () => get(t, `/oauth/poll?${query}`)),
      );
      assert.equal(status, 400);
      assert.equal(body.status, "failed");
      assert.equal(typeof body.error, "string");
      assert.deepEqual(Object.keys(body).sort(), ["error", "status"]);
    }
    assert.equal(t.upstream.calls.poll, polls, "upstream not polled");
  }));

Deno.test("bad input /oauth/poll: odd flow_state values → 400 expired, never 500, nothing written", () =>
  withApp(async (t) => {
    await seed(t);
    for (const value of ["%00", "%E2%80%AE", "a".repeat(4000), "__proto__", "%FF%FE"]) {
      const { status, body } = await pollBody(
        await withoutWrites(t, () => get(t, `/oauth/poll?flow_state=${value}`)),
      );
      assert.equal(status, 400);
      assert.deepEqual(body, { status: "expired", error: "Flow not found" });
    }
  }));

// ---- routing ---------------------------------------------------------------------------------

Deno.test("bad input: unknown path → 404 JSON error, nothing written", () =>
  withApp(async (t) => {
    await seed(t);
    for (
      const path of [
        "/nope",
        "/authorize/",
        "/token/extra",
        "/oauth",
        "/oauth/poll/",
        "/AUTHORIZE",
        "/__proto__",
        "/constructor",
        "/hasOwnProperty",
      ]
    ) {
      await assertError(await withoutWrites(t, () => get(t, path)), 404);
      await assertError(await withoutWrites(t, () => get(t, path, { method: "POST" })), 404);
    }
  }));

Deno.test("bad input: wrong method → 405 with Allow, JSON error, nothing written", () =>
  withApp(async (t) => {
    const { refreshToken } = await seed(t);
    const cases: [string, string, string][] = [
      ["/authorize", "POST", "GET"],
      ["/authorize", "PUT", "GET"],
      ["/authorize", "DELETE", "GET"],
      ["/oauth/poll", "POST", "GET"],
      ["/oauth/poll", "PATCH", "GET"],
      ["/token", "GET", "POST"],
      ["/token", "PUT", "POST"],
      ["/token", "DELETE", "POST"],
    ];
    for (const [path, method, allowed] of cases) {
      const response = await withoutWrites(
        t,
        () =>
          get(t, `${path}?grant_type=refresh_token&refresh_token=${refreshToken}`, {
            method,
            ...(method === "GET" ? {} : { headers: FORM, body: "grant_type=refresh_token" }),
          }),
      );
      const allow = response.headers.get("allow") ?? "";
      const methods = allow.split(",").map((m) => m.trim());
      assert.ok(methods.includes(allowed), `${method} ${path}: Allow ${allow}`);
      assert.ok(!methods.includes(method), `${method} ${path}: Allow ${allow}`);
      await assertError(response, 405);
    }
  }));
