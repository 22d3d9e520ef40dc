/**
 * ALLOWED_REDIRECT_URIS: `*` matches a port or the rest of one path segment; when set,
 * `/authorize` refuses any other redirect URI (400 invalid_request) and `/register` any
 * registration carrying one (400 invalid_redirect_uri). Unset: the spec's behaviour.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { isAllowedRedirect } from "../src/clients/redirect_allow_list.ts";
import {
  assertError,
  authorize,
  authorizeQuery,
  register,
  TEST_BASE,
  withApp,
  withEnv,
} from "./_helpers.ts";

/** The production example of docs/security.md's client allow-list. */
const PATTERNS = [
  "https://claude.ai/api/mcp/auth_callback",
  "https://vscode.dev/redirect",
  "http://127.0.0.1:*/*",
  "http://localhost:*/*",
  "cursor://*",
];
const ALLOW = { ALLOWED_REDIRECT_URIS: PATTERNS.join(", ") };

Deno.test("allow-list: * is a port or the rest of one path segment; everything else is exact", () => {
  const allowed = [
    "https://claude.ai/api/mcp/auth_callback",
    "https://vscode.dev/redirect",
    "http://127.0.0.1:33418/callback",
    "http://127.0.0.1:1/",
    "http://localhost:8080/cb",
    "cursor://callback",
  ];
  for (const uri of allowed) assert.ok(isAllowedRedirect(uri, PATTERNS), uri);
  const refused = [
    "https://claude.ai/api/mcp/auth_callback/",
    "https://claude.ai/api/mcp/auth_callback?x=1",
    "https://claude.ai.evil.example/api/mcp/auth_callback",
    "https://vscode.dev/redirect2",
    "http://127.0.0.1/callback",
    "http://127.0.0.1:33418/oauth/callback",
    "http://127.0.0.1:abc/callback",
    "http://127.0.0.1:33418@evil.example/cb",
    "http://127.0.0.1:33418/cb?next=x",
    "http://localhost.evil.example:80/cb",
    "https://localhost:8080/cb",
    "cursor://host/path",
    "cursorx://callback",
    "https://evil.example/",
  ];
  for (const uri of refused) assert.ok(!isAllowedRedirect(uri, PATTERNS), uri);
  // Regular expression characters in a pattern are literal.
  assert.ok(!isAllowedRedirect("https://aXb/cb", ["https://a.b/cb"]));
});

Deno.test("allow-list: a wildcard never matches a backslash, which browsers read as / in http(s) URLs", () => {
  // The URL parser (and every browser) reads `\\` as `/` in an http(s) URL, so this address
  // leads to evil.example although its text ends like the pattern.
  const uri = "https://evil.example\\.apps.example/cb";
  assert.equal(new URL(uri).host, "evil.example");
  assert.ok(!isAllowedRedirect(uri, ["https://*.apps.example/cb"]), uri);
  assert.ok(isAllowedRedirect("https://team.apps.example/cb", ["https://*.apps.example/cb"]));
});

Deno.test("allow-list: the variable is a comma list of absolute URIs; a bad entry stops start-up", () => {
  assert.deepEqual(loadConfig(ALLOW).allowedRedirectUris, PATTERNS);
  assert.equal(loadConfig({}).allowedRedirectUris, undefined);
  for (const raw of ["not a uri", "https://a.example/cb#x", ",,", "https://a.example/ cb"]) {
    assert.throws(
      () => loadConfig({ ALLOWED_REDIRECT_URIS: raw }),
      (error) => error instanceof ConfigError && error.variable === "ALLOWED_REDIRECT_URIS",
      raw,
    );
  }
});

Deno.test("allow-list: /authorize refuses a redirect_uri not on the list with 400 invalid_request", () =>
  withEnv(ALLOW, async (t) => {
    for (const uri of ["https://evil.example/cb", "http://127.0.0.1:9999/a/b"]) {
      await assertError(
        await authorize(t, { redirect_uri: uri }),
        400,
        "invalid_request",
        /not allowed/,
      );
    }
    assert.equal(t.upstream.calls.start, 0, "no device flow started");
    for (
      const uri of ["http://127.0.0.1:9999/callback", "https://claude.ai/api/mcp/auth_callback"]
    ) {
      const response = await authorize(t, { redirect_uri: uri });
      assert.equal(response.status, 200, await response.text());
    }
  }));

Deno.test("allow-list: /register refuses a registration carrying a URI not on the list", () =>
  withEnv(ALLOW, async (t) => {
    await assertError(
      await register(t, {
        redirect_uris: ["http://127.0.0.1:9999/callback", "https://evil.example/cb"],
      }),
      400,
      "invalid_redirect_uri",
      /evil\.example/,
    );
    const accepted = await register(t, { redirect_uris: ["http://127.0.0.1:9999/callback"] });
    assert.equal(accepted.status, 201, await accepted.text());
  }));

Deno.test("allow-list: unset, any redirect URI is taken as the spec says", () =>
  withApp(async (t) => {
    const response = await authorize(t, { redirect_uri: "https://anything.example/cb" });
    assert.equal(response.status, 200, await response.text());
    const registered = await register(t, { redirect_uris: ["https://anything.example/cb"] });
    assert.equal(registered.status, 201, await registered.text());
  }));

Deno.test("allow-list: under the registered policy a sole registered URI stands in and is checked too", () =>
  withEnv(
    { REDIRECT_URI_POLICY: "registered", ALLOWED_REDIRECT_URIS: "http://127.0.0.1:*/*" },
    async (t) => {
      const response = await register(t, { redirect_uris: ["http://127.0.0.1:9999/callback"] });
      const { client_id } = await response.json();
      const page = await t.app(
        new Request(
          `${TEST_BASE}/authorize?${authorizeQuery({ client_id, redirect_uri: null })}`,
        ),
      );
      assert.equal(page.status, 200, await page.text());
    },
  ));
