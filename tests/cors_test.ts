/**
 * CORS: the endpoints browser-based MCP clients call cross-origin (discovery, registration,
 * token, revocation) answer preflights and carry `Access-Control-Allow-Origin: *` without
 * credentials, on success and on error; the device page and its poll endpoint do not.
 */

import assert from "node:assert/strict";
import {
  authorizeQuery,
  issueTokens,
  TEST_BASE,
  type TestApp,
  token,
  withApp,
} from "./_helpers.ts";

const ORIGIN = "https://inspector.example";

const CORS_ENDPOINTS: [path: string, method: string][] = [
  ["/.well-known/oauth-authorization-server", "GET"],
  ["/.well-known/oauth-protected-resource", "GET"],
  ["/.well-known/oauth-protected-resource/mcp", "GET"],
  ["/register", "POST"],
  ["/token", "POST"],
  ["/revoke", "POST"],
];

function preflight(t: TestApp, path: string, method: string): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}${path}`, {
      method: "OPTIONS",
      headers: {
        Origin: ORIGIN,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "content-type, mcp-protocol-version, authorization",
      },
    }),
  );
}

function assertCors(response: Response, label: string): void {
  assert.equal(response.headers.get("access-control-allow-origin"), "*", label);
  assert.equal(
    response.headers.get("access-control-expose-headers"),
    "WWW-Authenticate, Retry-After",
    label,
  );
  assert.equal(response.headers.get("access-control-allow-credentials"), null, label);
}

function assertNoCors(response: Response, label: string): void {
  for (const name of response.headers.keys()) {
    assert.ok(!name.startsWith("access-control-"), `${label}: unexpected ${name}`);
  }
}

function headerList(value: string | null): string[] {
  return (value ?? "").split(",").map((item) => item.trim().toLowerCase()).filter(Boolean);
}

Deno.test("CORS: metadata, /register, /token and /revoke answer preflights with 204 and what MCP clients send", () =>
  withApp(async (t) => {
    for (const [path, method] of CORS_ENDPOINTS) {
      const response = await preflight(t, path, method);
      assert.equal(response.status, 204, path);
      assert.equal(await response.text(), "", path);
      assertCors(response, path);
      const methods = headerList(response.headers.get("access-control-allow-methods"));
      assert.ok(methods.includes(method.toLowerCase()), `${path}: ${methods}`);
      assert.ok(methods.includes("options"), path);
      const allowed = headerList(response.headers.get("access-control-allow-headers"));
      for (const header of ["content-type", "authorization", "mcp-protocol-version"]) {
        assert.ok(allowed.includes(header), `${path}: ${header} not in ${allowed}`);
      }
      assert.match(response.headers.get("access-control-max-age") ?? "", /^\d+$/, path);
    }
  }));

Deno.test("CORS: the path-inserted AS metadata URI answers preflights too", () =>
  withApp(async (t) => {
    const response = await preflight(t, "/.well-known/oauth-authorization-server/auth", "GET");
    assert.equal(response.status, 204);
    assertCors(response, "path-inserted");
    const get = await t.app(
      new Request("https://x.test/.well-known/oauth-authorization-server/auth", {
        headers: { Origin: ORIGIN },
      }),
    );
    assert.equal(get.status, 200);
    assertCors(get, "path-inserted GET");
    await get.body?.cancel();
  }, { env: { BASE_URL: "https://x.test/auth" } }));

Deno.test("CORS: successful metadata, registration, token and revocation responses carry ACAO *", () =>
  withApp(async (t) => {
    const headers = { Origin: ORIGIN };
    for (const [path] of CORS_ENDPOINTS.filter(([, method]) => method === "GET")) {
      const response = await t.app(new Request(`${TEST_BASE}${path}`, { headers }));
      assert.equal(response.status, 200, path);
      assertCors(response, path);
      await response.body?.cancel();
    }
    const registered = await t.app(
      new Request(`${TEST_BASE}/register`, {
        method: "POST",
        headers: { ...headers, "Content-Type": "application/json" },
        body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:1/cb"] }),
      }),
    );
    assert.equal(registered.status, 201);
    assertCors(registered, "register 201");
    await registered.body?.cancel();

    const tokens = await issueTokens(t);
    const refreshed = await token(
      t,
      { grant_type: "refresh_token", refresh_token: tokens.refresh_token },
      { headers },
    );
    assert.equal(refreshed.status, 200);
    assertCors(refreshed, "token 200");
    await refreshed.body?.cancel();

    const revoked = await t.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { ...headers, "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: "unknown" }),
      }),
    );
    assert.equal(revoked.status, 200);
    assertCors(revoked, "revoke 200");
  }));

Deno.test("CORS: error responses of CORS endpoints carry ACAO * too, so browsers can read them", () =>
  withApp(async (t) => {
    const cases: [string, RequestInit, number][] = [
      ["/token", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: "grant_type=refresh_token&refresh_token=bogus",
      }, 400],
      ["/token", { method: "POST", headers: { "Content-Type": "text/plain" }, body: "x" }, 400],
      ["/token", { method: "GET" }, 405],
      ["/register", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: '{"redirect_uris":["javascript:alert(1)"]}',
      }, 400],
      ["/revoke", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: "",
      }, 400],
      ["/.well-known/oauth-protected-resource/wrong", { method: "GET" }, 404],
      ["/.well-known/oauth-authorization-server", { method: "DELETE" }, 405],
    ];
    for (const [path, init, status] of cases) {
      const response = await t.app(
        new Request(`${TEST_BASE}${path}`, {
          ...init,
          headers: { ...init.headers as Record<string, string>, Origin: ORIGIN },
        }),
      );
      const label = `${init.method} ${path}`;
      assert.equal(response.status, status, label);
      assertCors(response, label);
      assert.equal(typeof (await response.json()).error, "string", label);
    }
  }));

Deno.test("CORS: a 500 'OAuth not configured' from /token carries ACAO * too", () =>
  withApp(async (t) => {
    const response = await t.app(
      new Request(`${TEST_BASE}/token`, {
        method: "POST",
        headers: { Origin: ORIGIN, "Content-Type": "application/x-www-form-urlencoded" },
        body: "grant_type=refresh_token&refresh_token=x",
      }),
    );
    assert.equal(response.status, 500);
    assertCors(response, "500");
    await response.body?.cancel();
  }, { configured: false }));

Deno.test("CORS: /authorize and /oauth/poll have no CORS headers and refuse preflights", () =>
  withApp(async (t) => {
    const headers = { Origin: ORIGIN };
    const page = await t.app(
      new Request(`${TEST_BASE}/authorize?${authorizeQuery()}`, { headers }),
    );
    assert.equal(page.status, 200);
    assertNoCors(page, "authorize 200");
    await page.body?.cancel();
    const badAuthorize = await t.app(
      new Request(`${TEST_BASE}/authorize?response_type=token`, { headers }),
    );
    assert.equal(badAuthorize.status, 400);
    assertNoCors(badAuthorize, "authorize 400");
    await badAuthorize.body?.cancel();
    for (const url of [`${TEST_BASE}/oauth/poll?flow_state=unknown`, `${TEST_BASE}/oauth/poll`]) {
      const response = await t.app(new Request(url, { headers }));
      assert.equal(response.status, 400, url);
      assertNoCors(response, url);
      await response.body?.cancel();
    }
    for (const path of ["/authorize", "/oauth/poll"]) {
      const response = await preflight(t, path, "GET");
      assert.equal(response.status, 405, path);
      assertNoCors(response, `OPTIONS ${path}`);
      await response.body?.cancel();
    }
  }));

Deno.test("CORS: unknown paths answer 404 without CORS headers", () =>
  withApp(async (t) => {
    const response = await t.app(
      new Request(`${TEST_BASE}/nothing-here`, { headers: { Origin: ORIGIN } }),
    );
    assert.equal(response.status, 404);
    assertNoCors(response, "404");
    await response.body?.cancel();
  }));
