/**
 * `POST /token` against spec §4.3 (§4.3.1, §4.3.2), the code and session states of §3.2 and
 * §3.3, the token response of §2.5 and the access-token claims of §2.6.
 */

import assert from "node:assert/strict";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import { jwtVerify } from "jose";
import { newSessionToken, sessionIdOf } from "../src/store/session_tokens.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  assertError,
  exchange,
  gitlabTokensOf,
  issueCode,
  issueTokens,
  type Json,
  PKCE,
  poll,
  readJsonAnswer,
  refresh,
  startFlow,
  TEST_BASE,
  TEST_REDIRECT as REDIRECT,
  TEST_SECRET,
  type TestApp,
  token,
  tokenJson,
  withApp,
} from "./_helpers.ts";

const TEN_MINUTES = 10 * 60 * 1000;
const FIVE_MINUTES = 5 * 60 * 1000;
const SCOPE = "mcp:tools mcp:resources";

/** Asserts a spec §2.5 token response and returns it. */
async function assertTokens(response: Response, expiresIn = 3600): Promise<Json> {
  const { status, body, headers } = await readJsonAnswer(response);
  assert.equal(status, 200, JSON.stringify(body));
  assert.deepEqual(Object.keys(body).sort(), [
    "access_token",
    "expires_in",
    "refresh_token",
    "scope",
    "token_type",
  ]);
  assert.equal(typeof body.access_token, "string");
  assert.equal(body.access_token.split(".").length, 3, "a JWT");
  assert.equal(body.token_type, "Bearer");
  assert.equal(body.expires_in, expiresIn);
  assert.equal(typeof body.refresh_token, "string");
  assert.ok(body.refresh_token.length > 0);
  assert.equal(body.scope, SCOPE);
  assert.equal(headers.get("cache-control"), "no-store");
  return body;
}

async function verifyAccessToken(t: TestApp, accessToken: string) {
  const { payload, protectedHeader } = await jwtVerify(
    accessToken,
    new TextEncoder().encode(TEST_SECRET),
    { algorithms: ["HS256"], currentDate: new Date(t.clock.now()) },
  );
  assert.equal(protectedHeader.alg, "HS256");
  return payload;
}

async function sessionOf(t: TestApp, code: string) {
  const stored = await t.store.getCode(code);
  assert.ok(stored, "code stored");
  return stored.value.sessionId;
}

/** Completes a flow whose upstream token lasts `expiresInSeconds`; returns the token response. */
async function tokensWithUpstreamExpiry(t: TestApp, expiresInSeconds: number): Promise<Json> {
  const flowState = await startFlow(t);
  t.upstream.approve({ expiresInSeconds });
  const done = await (await poll(t, flowState)).json();
  assert.equal(done.status, "complete");
  return await assertTokens(await exchange(t, done.code));
}

// ---- 4.3 grant types and configuration -------------------------------------------------------

Deno.test("4.3 grant_type not supported → 400 unsupported_grant_type, description says not supported", () =>
  withApp(async (t) => {
    for (const grantType of ["password", "client_credentials", "AUTHORIZATION_CODE", "implicit"]) {
      await assertError(
        await token(t, { grant_type: grantType, code: "x", code_verifier: PKCE.verifier }),
        400,
        "unsupported_grant_type",
        /not supported/,
      );
    }
  }));

Deno.test("4.3 grant_type absent → 400 unsupported_grant_type, description says not supported", () =>
  withApp(async (t) => {
    await assertError(
      await token(t, { code: "x", code_verifier: PKCE.verifier }),
      400,
      "unsupported_grant_type",
      /not supported/,
    );
    await assertError(
      await token(t, { grant_type: "" }),
      400,
      "unsupported_grant_type",
      /not supported/,
    );
    await assertError(await tokenJson(t, {}), 400, "unsupported_grant_type", /not supported/);
  }));

Deno.test("4.3 OAuth configuration missing → 500 server_error 'OAuth not configured'", () =>
  withApp(async (t) => {
    for (const form of [{ grant_type: "authorization_code" }, { grant_type: "refresh_token" }]) {
      await assertError(await token(t, form), 500, "server_error", "OAuth not configured");
    }
  }, { configured: false }));

Deno.test("4.3 check order: configuration missing beats unsupported grant_type", () =>
  withApp(async (t) => {
    await assertError(
      await token(t, { grant_type: "password" }),
      500,
      "server_error",
      "OAuth not configured",
    );
  }, { configured: false }));

// ---- 4.3.1 checks, in order ------------------------------------------------------------------

Deno.test("4.3.1 check 1: code missing → 400 invalid_request", () =>
  withApp(async (t) => {
    for (const code of [undefined, ""]) {
      await assertError(
        await token(t, {
          grant_type: "authorization_code",
          code_verifier: PKCE.verifier,
          redirect_uri: REDIRECT,
          ...(code === undefined ? {} : { code }),
        }),
        400,
        "invalid_request",
        /\bcode\b/,
      );
    }
  }));

Deno.test("4.3.1 check 2: code_verifier missing → 400 invalid_request", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    for (const verifier of [undefined, ""]) {
      await assertError(
        await token(t, {
          grant_type: "authorization_code",
          code,
          redirect_uri: REDIRECT,
          ...(verifier === undefined ? {} : { code_verifier: verifier }),
        }),
        400,
        "invalid_request",
        /code_verifier/,
      );
    }
    assert.ok(await t.store.getCode(code), "code untouched");
  }));

Deno.test("4.3.1 check 3: code unknown → 400 invalid_grant", () =>
  withApp(async (t) => {
    await issueCode(t);
    await assertError(await exchange(t, "not-a-code"), 400, "invalid_grant");
  }));

Deno.test("4.3.1 check 4: code past expiresAt → 400 invalid_grant, code deleted", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    t.clock.advance(TEN_MINUTES + 1);
    await assertError(await exchange(t, code), 400, "invalid_grant", /expired/i);
    assert.equal(await t.store.getCode(code), null, "code deleted");
    // Even back in its lifetime, the code is gone.
    t.clock.advance(-(TEN_MINUTES + 1));
    await assertError(await exchange(t, code), 400, "invalid_grant");
  }));

Deno.test("4.3.1 check 4: code lifetime is 10 minutes (valid at exactly 10 minutes)", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    t.clock.advance(TEN_MINUTES);
    await assertTokens(await exchange(t, code));
  }));

Deno.test("4.3.1 check 5: wrong verifier → 400 invalid_grant, code still works with the right one", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    for (const verifier of [PKCE.challenge, "wrong-verifier-wrong-verifier-wrong-verifier-1"]) {
      await assertError(
        await exchange(t, code, { code_verifier: verifier }),
        400,
        "invalid_grant",
        /verifier/,
      );
    }
    assert.ok(await t.store.getCode(code), "code not deleted");
    await assertTokens(await exchange(t, code));
  }));

Deno.test("4.3.1 check 6: redirect_uri differs → 400 invalid_grant, code not deleted", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    for (const uri of ["http://127.0.0.1:9999/other", `${REDIRECT}/`, "", "http://evil.test/cb"]) {
      await assertError(
        await exchange(t, code, { redirect_uri: uri }),
        400,
        "invalid_grant",
        /redirect_uri/,
      );
    }
    assert.ok(await t.store.getCode(code), "code not deleted");
    await assertTokens(await exchange(t, code));
  }));

Deno.test("4.3.1 check 6: redirect_uri absent when /authorize had one → 400 invalid_grant, code not deleted", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await assertError(
      await token(t, { grant_type: "authorization_code", code, code_verifier: PKCE.verifier }),
      400,
      "invalid_grant",
      /redirect_uri/,
    );
    assert.ok(await t.store.getCode(code), "code not deleted");
    await assertTokens(await exchange(t, code));
  }));

Deno.test("4.3.1 check 6: redirect_uri not required when /authorize had none", () =>
  withApp(async (t) => {
    const code = await issueCode(t, { redirect_uri: null });
    await assertTokens(
      await token(t, { grant_type: "authorization_code", code, code_verifier: PKCE.verifier }),
    );
  }));

Deno.test("4.3.1 check 7: session for the code missing → 400 invalid_grant, code not deleted", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await t.store.deleteSession(await sessionOf(t, code));
    await assertError(await exchange(t, code), 400, "invalid_grant", /session/i);
    assert.ok(await t.store.getCode(code), "code not deleted");
  }));

Deno.test("4.3.1 check order: code missing beats code_verifier missing", () =>
  withApp(async (t) => {
    const body = await assertError(
      await token(t, { grant_type: "authorization_code" }),
      400,
      "invalid_request",
    );
    assert.doesNotMatch(body.error_description, /code_verifier/);
  }));

Deno.test("4.3.1 check order: code_verifier missing beats unknown code", () =>
  withApp(async (t) => {
    await assertError(
      await token(t, { grant_type: "authorization_code", code: "unknown" }),
      400,
      "invalid_request",
      /code_verifier/,
    );
  }));

Deno.test("4.3.1 check order: expired code beats wrong verifier (and is deleted)", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    t.clock.advance(TEN_MINUTES + 1);
    await assertError(
      await exchange(t, code, { code_verifier: "wrong", redirect_uri: "http://x.test/" }),
      400,
      "invalid_grant",
      /expired/i,
    );
    assert.equal(await t.store.getCode(code), null);
  }));

Deno.test("4.3.1 check order: wrong verifier beats redirect_uri mismatch", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await assertError(
      await exchange(t, code, { code_verifier: "wrong", redirect_uri: "http://x.test/" }),
      400,
      "invalid_grant",
      /verifier/,
    );
  }));

Deno.test("4.3.1 check order: redirect_uri mismatch beats missing session", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await t.store.deleteSession(await sessionOf(t, code));
    await assertError(
      await exchange(t, code, { redirect_uri: "http://x.test/" }),
      400,
      "invalid_grant",
      /redirect_uri/,
    );
  }));

// ---- 4.3.1 success ---------------------------------------------------------------------------

Deno.test("4.3.1 success: 200 token response exactly per 2.5, Cache-Control no-store", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await assertTokens(await exchange(t, code));
  }));

Deno.test("4.3.1 success: expires_in is the configured ACCESS_TOKEN_TTL", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const body = await assertTokens(await exchange(t, code), 900);
    const claims = await verifyAccessToken(t, body.access_token);
    assert.equal(claims.exp, claims.iat! + 900);
  }, { env: { ACCESS_TOKEN_TTL: "900" } }));

Deno.test("4.3.1 success: session tokens set and code deleted (3.2 issued → consumed, 3.3 created → tokens issued)", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const sessionId = await sessionOf(t, code);
    t.clock.advance(1000);
    const now = t.clock.now();
    const body = await assertTokens(await exchange(t, code));
    assert.equal(await t.store.getCode(code), null, "code deleted");
    const session = await t.store.getSession(sessionId);
    assert.ok(session);
    assert.notEqual(session.value.mcpRefreshTokenHash, "", "refresh token stored");
    assert.equal(session.value.mcpTokenExpiry, now + 3600 * 1000);
    const found = await findSessionByRefreshToken(t.store, body.refresh_token);
    assert.equal(found?.value.id, sessionId);
  }));

Deno.test("3.2 the code is single use: second exchange → 400 invalid_grant", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await assertTokens(await exchange(t, code));
    await assertError(await exchange(t, code), 400, "invalid_grant");
  }));

Deno.test("4.3.1 JSON body accepted as well as form", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await assertTokens(
      await tokenJson(t, {
        grant_type: "authorization_code",
        code,
        code_verifier: PKCE.verifier,
        redirect_uri: REDIRECT,
      }),
    );
  }));

// ---- 4.3.2 -----------------------------------------------------------------------------------

Deno.test("4.3.2 check 1: refresh_token missing → 400 invalid_request", () =>
  withApp(async (t) => {
    await issueTokens(t);
    const forms: Record<string, string>[] = [
      { grant_type: "refresh_token" },
      { grant_type: "refresh_token", refresh_token: "" },
    ];
    for (const form of forms) {
      await assertError(await token(t, form), 400, "invalid_request", /refresh_token/);
    }
  }));

Deno.test("4.3.2 check 2: no session holds that refresh token → 400 invalid_grant", () =>
  withApp(async (t) => {
    const issued = await issueTokens(t);
    const sessionId = sessionIdOf(issued.refresh_token)!;
    const other = await issueTokens(t);
    const gone = await issueTokens(t);
    await t.store.deleteSession(sessionIdOf(gone.refresh_token)!);
    const before = await recordsOf(t.kv);
    const tokens = [
      "not-a-refresh-token",
      issued.access_token,
      // The right session, another random part: the session does not hold it.
      newSessionToken(sessionId),
      // A real token's random part naming another live session.
      issued.refresh_token.replace(sessionId, sessionIdOf(other.refresh_token)!),
      // A token of a session that has ended.
      gone.refresh_token,
      `${issued.refresh_token}x`,
    ];
    for (const refreshToken of tokens) {
      await assertError(await refresh(t, refreshToken), 400, "invalid_grant");
    }
    assert.deepEqual(await recordsOf(t.kv), before, "nothing written");
    assert.equal((await refresh(t, issued.refresh_token)).status, 200, "the real one still works");
  }));

Deno.test("4.3.2 success: rotates (old refresh token → invalid_grant, new one works)", () =>
  withApp(async (t) => {
    const first = await issueTokens(t);
    const second = await assertTokens(await refresh(t, first.refresh_token));
    assert.notEqual(second.refresh_token, first.refresh_token);
    await assertError(await refresh(t, first.refresh_token), 400, "invalid_grant");
    const third = await assertTokens(await refresh(t, second.refresh_token));
    assert.notEqual(third.refresh_token, second.refresh_token);
    await assertError(await refresh(t, second.refresh_token), 400, "invalid_grant");
  }));

Deno.test("4.3.2 success: body per 2.5, aud = session client id, no client_id needed or checked", () =>
  withApp(async (t) => {
    const first = await issueTokens(t);
    const body = await assertTokens(await refresh(t, first.refresh_token));
    assert.equal((await verifyAccessToken(t, body.access_token)).aud, "client-1");
    const other = await assertTokens(
      await refresh(t, body.refresh_token, { client_id: "another-client" }),
    );
    assert.equal((await verifyAccessToken(t, other.access_token)).aud, "client-1");
  }));

Deno.test("4.3.2 JSON body accepted as well as form", () =>
  withApp(async (t) => {
    const first = await issueTokens(t);
    await assertTokens(
      await tokenJson(t, { grant_type: "refresh_token", refresh_token: first.refresh_token }),
    );
  }));

Deno.test("4.3.2 success: session stores the new expiry (3.3 tokens issued → tokens issued)", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const sessionId = await sessionOf(t, code);
    const first = await assertTokens(await exchange(t, code));
    t.clock.advance(60_000);
    const now = t.clock.now();
    const second = await assertTokens(await refresh(t, first.refresh_token));
    const session = await t.store.getSession(sessionId);
    assert.equal(session?.value.mcpTokenExpiry, now + 3600 * 1000);
    assert.equal(
      (await findSessionByRefreshToken(t.store, second.refresh_token))?.value.id,
      sessionId,
    );
    assert.equal(await findSessionByRefreshToken(t.store, first.refresh_token), null);
  }));

Deno.test("4.3.2 step 3: upstream token expiring within 5 minutes → refreshed first and stored", () =>
  withApp(async (t) => {
    const first = await tokensWithUpstreamExpiry(t, 7200);
    const sid = String((await verifyAccessToken(t, first.access_token)).sid);
    t.clock.advance(7200 * 1000 - FIVE_MINUTES + 1000); // 4:59 left
    const now = t.clock.now();
    await assertTokens(await refresh(t, first.refresh_token));
    assert.equal(t.upstream.calls.refresh, 1);
    assert.deepEqual(t.upstream.refreshTokensSeen, ["gl-refresh-0"]);
    const session = await t.store.getSession(sid);
    assert.deepEqual(await gitlabTokensOf(t.store, session), {
      accessToken: "gl-access-1",
      refreshToken: "gl-refresh-1",
    });
    assert.equal(session?.value.upstreamTokenExpiry, now + 7200 * 1000);
  }));

Deno.test("4.3.2 step 3: upstream token at exactly 5 minutes left → refreshed first", () =>
  withApp(async (t) => {
    const first = await tokensWithUpstreamExpiry(t, 7200);
    t.clock.advance(7200 * 1000 - FIVE_MINUTES);
    await assertTokens(await refresh(t, first.refresh_token));
    assert.equal(t.upstream.calls.refresh, 1);
  }));

Deno.test("4.3.2 step 3: upstream token already expired → refreshed first", () =>
  withApp(async (t) => {
    const first = await tokensWithUpstreamExpiry(t, 7200);
    t.clock.advance(3 * 7200 * 1000);
    await assertTokens(await refresh(t, first.refresh_token));
    assert.equal(t.upstream.calls.refresh, 1);
  }));

Deno.test("4.3.2 step 3: upstream token with more than 5 minutes left → not refreshed", () =>
  withApp(async (t) => {
    const first = await tokensWithUpstreamExpiry(t, 7200);
    t.clock.advance(7200 * 1000 - FIVE_MINUTES - 1000); // 5:01 left
    await assertTokens(await refresh(t, first.refresh_token));
    assert.equal(t.upstream.calls.refresh, 0);
  }));

Deno.test("4.3.2 step 3: upstream refresh fails → 400 invalid_grant 'Failed to refresh underlying upstream token'", () =>
  withApp(async (t) => {
    const first = await tokensWithUpstreamExpiry(t, 60);
    t.upstream.refreshes.push(
      new UpstreamError("transient", "timeout", "GitLab did not answer in time"),
      new UpstreamError("terminal", "invalid_grant", "The provided authorization grant is invalid"),
    );
    for (let i = 0; i < 2; i++) {
      await assertError(
        await refresh(t, first.refresh_token),
        400,
        "invalid_grant",
        "Failed to refresh underlying upstream token",
      );
    }
    assert.equal(t.upstream.calls.refresh, 2, "a transient failure leaves the session to retry");
    // GitLab refusing its refresh token ends the session (docs/gateway.md): step 2 from then on.
    await assertError(await refresh(t, first.refresh_token), 400, "invalid_grant");
    assert.equal(t.upstream.calls.refresh, 2);
  }));

Deno.test("4.3.2 step 3: session cannot be re-read after the upstream refresh → 400 invalid_grant", () =>
  withApp(async (t) => {
    const first = await tokensWithUpstreamExpiry(t, 60);
    const sid = String((await verifyAccessToken(t, first.access_token)).sid);
    t.upstream.refreshes.push(async () => {
      await t.store.deleteSession(sid);
      return { accessToken: "gl-access-x", refreshToken: "gl-refresh-x", expiresInSeconds: 7200 };
    });
    await assertError(await refresh(t, first.refresh_token), 400, "invalid_grant");
    assert.equal(t.upstream.calls.refresh, 1);
  }));

// ---- 2.6 claims ------------------------------------------------------------------------------

Deno.test("2.6 access-token claims (authorization_code): iss, sub, aud, sid, scope, gitlab_user, iat, exp", () =>
  withApp(async (t) => {
    t.upstream.user = { id: 31337, username: "linus" };
    const code = await issueCode(t, { client_id: "client-claims" });
    const sessionId = await sessionOf(t, code);
    t.clock.advance(2500);
    const iat = Math.floor(t.clock.now() / 1000);
    const body = await assertTokens(await exchange(t, code));
    const claims = await verifyAccessToken(t, body.access_token);
    assert.equal(claims.iss, TEST_BASE);
    assert.equal(claims.sub, "31337");
    assert.equal(claims.aud, "client-claims");
    assert.equal(claims.sid, sessionId);
    assert.equal(claims.scope, SCOPE);
    assert.equal(claims.gitlab_user, "linus");
    assert.equal(claims.iat, iat);
    assert.equal(claims.exp, iat + 3600);
  }));

Deno.test("2.6 access-token claims (refresh_token): same claims, iat and exp from the refresh time", () =>
  withApp(async (t) => {
    const first = await issueTokens(t);
    const before = await verifyAccessToken(t, first.access_token);
    t.clock.advance(30 * 60 * 1000);
    const iat = Math.floor(t.clock.now() / 1000);
    const body = await assertTokens(await refresh(t, first.refresh_token), 1800);
    const claims = await verifyAccessToken(t, body.access_token);
    assert.equal(claims.iss, TEST_BASE);
    assert.equal(claims.sub, "4242");
    assert.equal(claims.aud, "client-1");
    assert.equal(claims.sid, before.sid);
    assert.equal(claims.scope, SCOPE);
    assert.equal(claims.gitlab_user, "ada");
    assert.equal(claims.iat, iat);
    assert.equal(claims.exp, iat + 1800);
  }, { env: { ACCESS_TOKEN_TTL: "1800" } }));

Deno.test("2.6 iss without BASE_URL: the origin of the request URL", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const url = "http://svc.example:8080/token";
    const body = await assertTokens(
      await token(t, {
        grant_type: "authorization_code",
        code,
        code_verifier: PKCE.verifier,
        redirect_uri: REDIRECT,
      }, { url }),
    );
    assert.equal((await verifyAccessToken(t, body.access_token)).iss, "http://svc.example:8080");
    // Forwarded headers are ignored without TRUST_PROXY.
    const second = await assertTokens(
      await token(t, { grant_type: "refresh_token", refresh_token: body.refresh_token }, {
        url,
        headers: { "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example" },
      }),
    );
    assert.equal((await verifyAccessToken(t, second.access_token)).iss, "http://svc.example:8080");
  }, { env: { BASE_URL: "" } }));

Deno.test("2.6 iss with TRUST_PROXY=true: BASE_URL, never the X-Forwarded-Host a client may have sent", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    const body = await assertTokens(
      await token(t, {
        grant_type: "authorization_code",
        code,
        code_verifier: PKCE.verifier,
        redirect_uri: REDIRECT,
      }, {
        url: "http://10.0.0.5:8000/token",
        headers: { "X-Forwarded-Proto": "http", "X-Forwarded-Host": "evil.example" },
      }),
    );
    assert.equal((await verifyAccessToken(t, body.access_token)).iss, "https://auth.example.com");
  }, { env: { BASE_URL: "https://auth.example.com", TRUST_PROXY: "true" } }));

Deno.test("2.6 the access token is signed with the configured secret (another secret fails)", () =>
  withApp(async (t) => {
    const { access_token } = await issueTokens(t);
    await verifyAccessToken(t, access_token);
    await assert.rejects(
      jwtVerify(access_token, new TextEncoder().encode(`${TEST_SECRET}-other`), {
        algorithms: ["HS256"],
        currentDate: new Date(t.clock.now()),
      }),
    );
  }));
