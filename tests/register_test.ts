/**
 * `POST /register`: dynamic client registration for public clients (RFC 7591), the client name
 * on the device page, and registrations surviving a restart.
 */

import assert from "node:assert/strict";
import { recordsOf } from "../src/store/keys.ts";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import {
  assertError,
  authorize,
  authorizeQuery,
  countRecords,
  type Json,
  makeTestApp,
  readJsonAnswer,
  register,
  registerClient,
  TEST_BASE,
  TEST_REDIRECT,
  TEST_SECRET,
  type TestApp,
  withApp,
  withEnv,
} from "./_helpers.ts";
import { spawnService } from "./_service.ts";
import { addClient } from "./_machine_clients.ts";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";

/** What MCP clients in the wild send (shape of Claude Code / the TypeScript SDK's request). */
const TYPICAL = {
  redirect_uris: ["http://localhost:6274/oauth/callback"],
  token_endpoint_auth_method: "none",
  grant_types: ["authorization_code", "refresh_token"],
  response_types: ["code"],
  client_name: "Example MCP Client",
  client_uri: "https://client.example/",
  logo_uri: "https://client.example/logo.png",
  scope: "mcp:tools mcp:resources",
  contacts: ["ops@client.example"],
  software_id: "example-mcp-client",
  software_version: "1.2.3",
};

Deno.test("register: standard metadata → 201 with client_id, client_id_issued_at and the metadata echoed", () =>
  withApp(async (t) => {
    const { status, body, headers } = await readJsonAnswer(await register(t, TYPICAL));
    assert.equal(status, 201);
    assert.equal(headers.get("cache-control"), "no-store");
    const { client_id, client_id_issued_at, ...echoed } = body;
    assert.equal(typeof client_id, "string");
    assert.ok(client_id.length >= 16, client_id);
    assert.equal(client_id_issued_at, Math.floor(t.clock.now() / 1000));
    assert.deepEqual(echoed, TYPICAL);
    const stored = await t.store.getClient(client_id);
    assert.deepEqual(stored?.redirectUris, TYPICAL.redirect_uris);
    assert.equal(stored?.clientName, "Example MCP Client");
  }));

Deno.test("register: only redirect_uris → public-client defaults echoed", () =>
  withApp(async (t) => {
    const { status, body } = await readJsonAnswer(
      await register(t, { redirect_uris: ["https://app.example/cb"] }),
    );
    assert.equal(status, 201);
    const { client_id: _, client_id_issued_at: __, ...echoed } = body;
    assert.deepEqual(echoed, {
      redirect_uris: ["https://app.example/cb"],
      token_endpoint_auth_method: "none",
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
    });
  }));

Deno.test("register: unknown fields are ignored and not echoed", () =>
  withApp(async (t) => {
    const { status, body } = await readJsonAnswer(
      await register(t, {
        ...TYPICAL,
        jwks_uri: "https://client.example/jwks",
        software_statement: "eyJ.x.y",
        x_vendor_extension: { nested: [1, 2] },
        client_secret: "ignored",
      }),
    );
    assert.equal(status, 201);
    for (const field of ["jwks_uri", "software_statement", "x_vendor_extension", "client_secret"]) {
      assert.equal(field in body, false, field);
    }
  }));

Deno.test("register: the same client registering twice gets two distinct client_ids", () =>
  withApp(async (t) => {
    const first = await readJsonAnswer(await register(t, TYPICAL));
    const second = await readJsonAnswer(await register(t, TYPICAL));
    assert.equal(first.status, 201);
    assert.equal(second.status, 201);
    assert.notEqual(first.body.client_id, second.body.client_id);
    assert.ok(await t.store.getClient(first.body.client_id));
    assert.ok(await t.store.getClient(second.body.client_id));
  }));

Deno.test("register: loopback http, https and private-use scheme redirect URIs are accepted", () =>
  withApp(async (t) => {
    const redirect_uris = [
      "http://127.0.0.1:33418/callback",
      "http://[::1]/callback",
      "http://localhost:6274/oauth/callback",
      "https://app.example/oauth/callback?tenant=1",
      "com.example.app:/oauth2redirect",
    ];
    const { status, body } = await readJsonAnswer(await register(t, { redirect_uris }));
    assert.equal(status, 201, JSON.stringify(body));
    assert.deepEqual(body.redirect_uris, redirect_uris);
  }));

Deno.test("register: bad redirect_uris → 400 invalid_redirect_uri", () =>
  withApp(async (t) => {
    const cases: [string, unknown][] = [
      ["missing", undefined],
      ["empty", []],
      ["not an array", "https://app.example/cb"],
      ["not strings", [42]],
      ["not a URL", ["not a url"]],
      ["relative", ["/callback"]],
      ["javascript:", ["javascript:alert(1)"]],
      ["data:", ["data:text/html,<script>alert(1)</script>"]],
      ["fragment", ["https://app.example/cb#frag"]],
      ["empty fragment", ["https://app.example/cb#"]],
      ["http non-loopback", ["http://app.example/cb"]],
      ["http look-alike of localhost", ["http://localhost.evil.example/cb"]],
      ["one bad among good", ["https://app.example/cb", "javascript:alert(1)"]],
    ];
    for (const [name, redirect_uris] of cases) {
      const body = redirect_uris === undefined ? { client_name: "x" } : { redirect_uris };
      const error = await assertError(await register(t, body), 400, "invalid_redirect_uri");
      assert.ok(error.error_description, name);
    }
  }));

Deno.test("register: unsupported metadata → 400 invalid_client_metadata", () =>
  withApp(async (t) => {
    const redirect_uris = ["https://app.example/cb"];
    const cases: Json[] = [
      { token_endpoint_auth_method: "client_secret_basic" },
      { token_endpoint_auth_method: "client_secret_post" },
      { grant_types: ["client_credentials"] },
      { grant_types: ["authorization_code", "implicit"] },
      { grant_types: ["refresh_token"] },
      { grant_types: "authorization_code" },
      { response_types: ["token"] },
      { client_name: 42 },
      { client_name: { en: "x" } },
      { client_name: "x".repeat(501) },
      { contacts: "ops@client.example" },
      { client_uri: "javascript:alert(1)" },
    ];
    for (const extra of cases) {
      const response = await register(t, { redirect_uris, ...extra });
      const body = await assertError(response, 400, "invalid_client_metadata");
      assert.ok(body.error_description, JSON.stringify(extra));
    }
    for (const body of [[], "a string", 42, null]) {
      await assertError(
        await register(t, body === "a string" ? '"a string"' : body),
        400,
        "invalid_client_metadata",
      );
    }
  }));

Deno.test("register: response_types and grant_types must agree (RFC 7591 §2.1); none refused, a device-only client's default is []", () =>
  withApp(async (t) => {
    const redirect_uris = ["https://app.example/cb"];
    const refused: Json[] = [
      { redirect_uris, response_types: [] },
      { redirect_uris, grant_types: ["authorization_code"], response_types: [] },
      { redirect_uris, grant_types: [] },
      { redirect_uris, grant_types: [], response_types: [] },
      { grant_types: [DEVICE_CODE_GRANT_TYPE], response_types: ["code"] },
      {
        redirect_uris,
        grant_types: [DEVICE_CODE_GRANT_TYPE, "refresh_token"],
        response_types: ["code"],
      },
    ];
    for (const body of refused) {
      const error = await assertError(await register(t, body), 400, "invalid_client_metadata");
      assert.ok(error.error_description, JSON.stringify(body));
    }
    assert.equal((await recordsOf(t.kv, "client")).length, 0, "nothing stored");
    for (const response_types of [undefined, []]) {
      const { status, body } = await readJsonAnswer(
        await register(t, { grant_types: [DEVICE_CODE_GRANT_TYPE], response_types }),
      );
      assert.equal(status, 201, JSON.stringify(body));
      assert.deepEqual(body.response_types, [], "a device-only client has no response type");
      assert.deepEqual(
        (await t.store.getClient(body.client_id))?.metadata.response_types,
        [],
        "stored as echoed",
      );
    }
  }));

Deno.test("authorize: a known client without the authorization_code grant (device-only registration, machine client) → 400 unauthorized_client, under every policy, nothing started", async () => {
  const envs: Record<string, string>[] = [{}, { REDIRECT_URI_POLICY: "registered" }];
  for (const env of envs) {
    await withEnv(env, async (t) => {
      const deviceOnly = await registerClient(t, [TEST_REDIRECT], {
        grant_types: [DEVICE_CODE_GRANT_TYPE],
      });
      const machine = (await addClient(t.store, { id: "nightly-report" })).client_id;
      const refusals: [string, RegExp][] = [
        [deviceOnly, /grant_types do not include authorization_code/],
        [machine, /machine client's: its only grant is client_credentials/],
      ];
      for (const [clientId, description] of refusals) {
        for (const redirect_uri of [TEST_REDIRECT, "https://attacker.example/cb"]) {
          await assertError(
            await authorize(t, { client_id: clientId, redirect_uri }),
            400,
            "unauthorized_client",
            description,
          );
        }
      }
      assert.equal(await countRecords(t.kv, "flow"), 0, "no sign-in started");
      assert.equal(t.upstream.calls.start, 0, "GitLab not asked");
      // The same registration with the grant is served.
      const both = await registerClient(t, [TEST_REDIRECT], {
        grant_types: ["authorization_code", DEVICE_CODE_GRANT_TYPE],
      });
      const page = await authorize(t, { client_id: both, redirect_uri: TEST_REDIRECT });
      assert.equal(page.status, 200, await page.text());
    });
  }
});

Deno.test("register: wrong content type, malformed JSON, non-UTF-8 → 400 JSON; over 64 KiB → 413 JSON", () =>
  withApp(async (t) => {
    const json = JSON.stringify(TYPICAL);
    await assertError(
      await register(t, json, { "Content-Type": "application/x-www-form-urlencoded" }),
      400,
      "invalid_request",
    );
    await assertError(
      await register(t, json, { "Content-Type": "text/plain" }),
      400,
      "invalid_request",
    );
    await assertError(await register(t, json, {}), 400, "invalid_request");
    await assertError(await register(t, '{"redirect_uris": ['), 400, "invalid_request");
    await assertError(
      await t.app(
        new Request(`${TEST_BASE}/register`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]),
        }),
      ),
      400,
      "invalid_request",
    );
    const huge = JSON.stringify({ ...TYPICAL, padding: "x".repeat(64 * 1024) });
    await assertError(await register(t, huge), 413, "invalid_request");
    // Nothing was stored by any of them.
    const clients = await recordsOf(t.kv, "client");
    assert.equal(clients.length, 0);
  }));

Deno.test("register: application/json with a charset parameter is accepted", () =>
  withApp(async (t) => {
    const response = await register(t, TYPICAL, {
      "Content-Type": "application/json; charset=utf-8",
    });
    assert.equal(response.status, 201);
    await response.body?.cancel();
  }));

Deno.test("register: GET → 405 with Allow: POST, OPTIONS", () =>
  withApp(async (t) => {
    const response = await t.app(new Request(`${TEST_BASE}/register`));
    assert.equal(response.headers.get("allow"), "POST, OPTIONS");
    await assertError(response, 405, "invalid_request");
  }));

Deno.test("register: without OAuth configuration → 500 'OAuth not configured'", async () => {
  const t = await makeTestApp({ configured: false });
  try {
    const body = await assertError(await register(t, TYPICAL), 500, "server_error");
    assert.equal(body.error_description, "OAuth not configured");
  } finally {
    t.close();
  }
});

async function authorizePage(t: TestApp, overrides: Record<string, string | null>) {
  const response = await authorize(t, overrides);
  assert.equal(response.status, 200);
  return await response.text();
}

Deno.test("page: names a registered client by its client_name (escaped) and shows the redirect host", () =>
  withApp(async (t) => {
    const { body } = await readJsonAnswer(
      await register(t, {
        redirect_uris: ["http://127.0.0.1:9999/callback"],
        client_name: `Claude <Desktop> & "friends"`,
      }),
    );
    const html = await authorizePage(t, { client_id: body.client_id });
    assert.ok(html.includes("Claude &lt;Desktop&gt; &amp; &quot;friends&quot;"));
    assert.ok(!html.includes("<Desktop>"));
    assert.match(html, /return to: <strong><bdi>http:\/\/127\.0\.0\.1:9999<\/bdi><\/strong>/);
  }));

Deno.test("page: an unregistered client is shown by its client_id, and the redirect host still shown", () =>
  withApp(async (t) => {
    const html = await authorizePage(t, {
      client_id: "some-unregistered-client",
      redirect_uri: "https://app.example:8443/cb",
    });
    assert.match(html, /<code><bdi>some-unregistered-client<\/bdi><\/code>/);
    assert.match(html, /return to: <strong><bdi>https:\/\/app\.example:8443<\/bdi><\/strong>/);
  }));

Deno.test("page: a registered client without client_name is shown by its client_id", () =>
  withApp(async (t) => {
    const { body } = await readJsonAnswer(
      await register(t, { redirect_uris: ["http://127.0.0.1:9999/callback"] }),
    );
    const html = await authorizePage(t, { client_id: body.client_id });
    assert.ok(html.includes(`<code><bdi>${body.client_id}</bdi></code>`));
  }));

Deno.test("page: under the registered policy, an omitted redirect_uri still shows the registered host", () =>
  withEnv({ REDIRECT_URI_POLICY: "registered" }, async (t) => {
    const { body } = await readJsonAnswer(
      await register(t, { redirect_uris: ["https://app.example/cb"], client_name: "App" }),
    );
    const html = await authorizePage(t, { client_id: body.client_id, redirect_uri: null });
    assert.match(html, /<strong><bdi>App<\/bdi><\/strong>/);
    assert.match(html, /return to: <strong><bdi>https:\/\/app\.example<\/bdi><\/strong>/);
  }));

Deno.test("register: a registration survives a restart on a file KV and authorizes under the registered policy", async () => {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir();
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "register-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/kv.sqlite`,
    REDIRECT_URI_POLICY: "registered",
  };
  const redirectUri = "http://127.0.0.1:9/callback";
  try {
    const first = await spawnService(env);
    let clientId: string;
    try {
      const response = await fetch(`${first.url}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ redirect_uris: [redirectUri], client_name: "Survivor" }),
      });
      assert.equal(response.status, 201);
      clientId = (await response.json()).client_id;
    } finally {
      assert.equal(await first.stop(), 0);
    }
    const second = await spawnService(env);
    try {
      const query = authorizeQuery({ client_id: clientId, redirect_uri: redirectUri });
      const response = await fetch(`${second.url}/authorize?${query}`);
      const html = await response.text();
      assert.equal(response.status, 200, html);
      assert.ok(html.includes("Survivor"));
      const unknown = await fetch(
        `${second.url}/authorize?${authorizeQuery({ client_id: "nope" })}`,
      );
      assert.equal(unknown.status, 400);
      assert.equal((await unknown.json()).error, "invalid_request");
    } finally {
      assert.equal(await second.stop(), 0);
    }
  } finally {
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});

// ---- abuse caps: what open registration may store, and for how long --------------------------

Deno.test("register: metadata over 4 KiB is refused, so open registration cannot fill the KV", () =>
  withApp(async (t) => {
    const longUris = Array.from(
      { length: 20 },
      (_, i) => `https://app.example/${i}/${"p".repeat(1000)}`,
    );
    const cases: Json[] = [
      { redirect_uris: longUris },
      { ...TYPICAL, contacts: ["a@client.example", "b", "c", "d", "e", "f"] },
      { ...TYPICAL, contacts: [`${"x".repeat(501)}@client.example`] },
      { ...TYPICAL, grant_types: Array(1000).fill("authorization_code") },
      { ...TYPICAL, response_types: Array(11).fill("code") },
    ];
    for (const body of cases) {
      await assertError(await register(t, body), 400, "invalid_client_metadata");
    }
    assert.equal((await recordsOf(t.kv, "client")).length, 0, "nothing stored");
    const fits = await register(t, { ...TYPICAL, contacts: Array(5).fill("x".repeat(500)) });
    assert.equal(fits.status, 201, "five contacts of 500 characters fit");
    await fits.body?.cancel();
  }));

/** `/authorize` with `clientId` and TYPICAL's redirect URI; returns the status. */
async function authorizeAs(t: TestApp, clientId: string): Promise<number> {
  const response = await authorize(t, {
    client_id: clientId,
    redirect_uri: TYPICAL.redirect_uris[0],
  });
  await response.body?.cancel();
  return response.status;
}

const HOUR_MS = 3600 * 1000;
const DAY_MS = 24 * HOUR_MS;

Deno.test("register: a registration no /authorize used within 24 hours is forgotten", () =>
  withEnv({ REDIRECT_URI_POLICY: "registered" }, async (t) => {
    const clientId = await registerClient(t, TYPICAL.redirect_uris, TYPICAL);
    t.clock.advance(DAY_MS + 1);
    assert.equal(await t.store.getClient(clientId), null);
    assert.deepEqual(await t.store.listClients(), [], "nor listed to the operator");
    assert.equal(await authorizeAs(t, clientId), 400, "unknown under the registered policy");
  }));

Deno.test("register: a used registration lives 30 days after its last use, renewed at most daily", () =>
  withEnv({ REDIRECT_URI_POLICY: "registered" }, async (t) => {
    const clientId = await registerClient(t, TYPICAL.redirect_uris, TYPICAL);
    t.clock.advance(23 * HOUR_MS);
    assert.equal(await authorizeAs(t, clientId), 200, "first use within the day");
    const renewed = await recordsOf(t.kv, "client");

    t.clock.advance(HOUR_MS);
    assert.equal(await authorizeAs(t, clientId), 200);
    assert.deepEqual(await recordsOf(t.kv, "client"), renewed, "a use a day later writes nothing");

    t.clock.advance(29 * DAY_MS);
    assert.equal(await authorizeAs(t, clientId), 200, "29 days after the first use");
    t.clock.advance(30 * DAY_MS - 1);
    assert.ok(await t.store.getClient(clientId), "30 days after the last use, not yet gone");
    t.clock.advance(2);
    assert.equal(await t.store.getClient(clientId), null, "forgotten 30 days after the last use");
    assert.equal(await authorizeAs(t, clientId), 400);
  }));
