/**
 * Our own device authorization endpoint (RFC 8628, issue 36) over real HTTP against the real
 * app (in-memory KV, fake clock): `POST /device_authorization` under the client policy of
 * `/authorize`, the device_code grant's every answer, the race of parallel polls, and the
 * DEVICE_AUTHORIZATION switch (SECURITY_PROFILE=strict). The user's approval here is the
 * store's (`approveDeviceAuthorization`, what the /device sign-in commits).
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { loadConfig } from "../src/app/config.ts";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { MAX_QUERY_PARAMETER_LENGTH } from "../src/http/params.ts";
import { createLogger } from "../src/logger.ts";
import { newSession } from "../src/session/life.ts";
import type { StoreDatabase } from "../src/store/mod.ts";
import { openDatabase } from "../src/store/open.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";
import { addClient } from "./_machine_clients.ts";
import {
  assertError,
  assertNo500,
  countRecords,
  kvText,
  makeTestAppOn,
  registerClient,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
  token,
  withApp,
} from "./_helpers.ts";

/** SECURITY_PROFILE=strict as it may start (on gitlab.com, open to anyone on purpose). */
const STRICT = { SECURITY_PROFILE: "strict", ALLOW_ANY_GITLAB_USER: "true" };

const METRICS_TOKEN = "metrics-token-that-is-at-least-32-bytes!";

const DEVICE = { grant_types: [DEVICE_CODE_GRANT_TYPE] };

function deviceAuthorization(
  t: TestApp<StoreDatabase>,
  form: Record<string, string>,
): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/device_authorization`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(form),
    }),
  );
}

/** A device-only client (registered without redirect URIs). */
async function deviceClient(t: TestApp<StoreDatabase>): Promise<string> {
  const response = await t.app(
    new Request(`${TEST_BASE}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_name: "build-box agent", ...DEVICE }),
    }),
  );
  const body = await response.json();
  assert.equal(response.status, 201, JSON.stringify(body));
  assert.deepEqual(body.grant_types, [DEVICE_CODE_GRANT_TYPE]);
  return body.client_id;
}

interface Started {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
}

async function start(
  t: TestApp<StoreDatabase>,
  clientId: string,
  extra: Record<string, string> = {},
) {
  const response = await deviceAuthorization(t, { client_id: clientId, ...extra });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  assert.equal(response.headers.get("cache-control"), "no-store");
  return JSON.parse(text) as Started;
}

function pollToken(
  t: TestApp<StoreDatabase>,
  clientId: string,
  deviceCode: string,
): Promise<Response> {
  return token(t, {
    grant_type: DEVICE_CODE_GRANT_TYPE,
    device_code: deviceCode,
    client_id: clientId,
  });
}

/** What the /device sign-in commits once the user approved: a session for `octocat`. */
async function approve(t: TestApp<StoreDatabase>, deviceCode: string): Promise<void> {
  const device = await t.store.getDeviceAuthorization(deviceCode);
  assert.ok(device);
  const sealedTokens = await t.store.sealUpstreamTokens({
    accessToken: "gitlab-access",
    refreshToken: "gitlab-refresh",
  });
  const session = newSession(
    device.value.clientId,
    { sealedTokens, expiresAt: 0, user: { id: "42", username: "octocat" } },
    t.clock.now(),
    600,
    device.value.resource,
  );
  assert.ok(await t.store.approveDeviceAuthorization(device, session));
}

async function deny(t: TestApp<StoreDatabase>, deviceCode: string): Promise<void> {
  const device = await t.store.getDeviceAuthorization(deviceCode);
  assert.ok(device);
  assert.ok(await t.store.updateDeviceAuthorization(device, { ...device.value, status: "denied" }));
}

Deno.test("device authorization: the answer of RFC 8628 §3.2, its secrets hashed in the store", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const started = await start(t, clientId, { scope: "mcp:tools" });
    assert.deepEqual(Object.keys(started).sort(), [
      "device_code",
      "expires_in",
      "interval",
      "user_code",
      "verification_uri",
      "verification_uri_complete",
    ]);
    assert.match(started.user_code, /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
    // 32 random bytes, base64url: 256 bits.
    assert.ok(started.device_code.length >= 43, started.device_code);
    assert.equal(started.verification_uri, `${TEST_BASE}/device`);
    assert.equal(
      started.verification_uri_complete,
      `${TEST_BASE}/device?user_code=${started.user_code}`,
    );
    assert.equal(started.expires_in, 600);
    assert.equal(started.interval, 5);
    const stored = await kvText(t.kv);
    assert.ok(!stored.includes(started.device_code), "device code in clear");
    assert.ok(!stored.includes(started.user_code), "user code in clear");
    assert.ok(!stored.includes(started.user_code.replace("-", "")), "user code in clear");
  });
});

Deno.test("device authorization: DEVICE_CODE_TTL sets expires_in, 5–3600 seconds", async () => {
  await withApp(async (t) => {
    const started = await start(t, await deviceClient(t));
    assert.equal(started.expires_in, 30);
  }, { env: { DEVICE_CODE_TTL: "30" } });
  const env = { GITLAB_CLIENT_ID: "x", JWT_SECRET: TEST_SECRET };
  assert.equal(loadConfig({ ...env, DEVICE_CODE_TTL: "5" }).deviceCodeTtlSeconds, 5);
  assert.equal(loadConfig({ ...env, DEVICE_CODE_TTL: "3600" }).deviceCodeTtlSeconds, 3600);
  assert.throws(() => loadConfig({ ...env, DEVICE_CODE_TTL: "4" }), /DEVICE_CODE_TTL/);
  assert.throws(() => loadConfig({ ...env, DEVICE_CODE_TTL: "3601" }), /DEVICE_CODE_TTL/);
});

Deno.test("device authorization: bad requests answer RFC 6749 §5.2 errors, never 500", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    await assertError(await deviceAuthorization(t, {}), 400, "invalid_request");
    await assertError(
      await deviceAuthorization(t, { client_id: clientId, scope: "mcp:tools admin" }),
      400,
      "invalid_scope",
    );
    await assertError(
      await deviceAuthorization(t, { client_id: clientId, resource: "https://elsewhere.test/mcp" }),
      400,
      "invalid_target",
    );
    const codeClient = await registerClient(t, ["http://127.0.0.1:9999/callback"]);
    await assertError(
      await deviceAuthorization(t, { client_id: codeClient }),
      400,
      "unauthorized_client",
    );
    await assertError(
      await t.app(
        new Request(`${TEST_BASE}/device_authorization`, {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: `client_id=${clientId}&client_id=${clientId}`,
        }),
      ),
      400,
      "invalid_request",
    );
    // The resource of /authorize's rules, named explicitly.
    await start(t, clientId, { resource: `${TEST_BASE}/mcp` });
  });
});

Deno.test("device authorization: a parameter sent without a value is as if omitted, as at /token (RFC 6749 §3.1–3.2)", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code } = await start(t, clientId, { resource: "", scope: "" });
    const stored = await t.store.getDeviceAuthorization(device_code);
    assert.equal(stored?.value.resource, `${TEST_BASE}/mcp`, "the default resource");
    await assertError(await deviceAuthorization(t, { client_id: "" }), 400, "invalid_request");
  });
});

Deno.test("device authorization: a client_id or scope longer than /authorize takes is refused over HTTP, nothing stored or logged", async () => {
  const logged: string[] = [];
  await withApp(async (t) => {
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
    const post = (body: URLSearchParams | string, type = "application/x-www-form-urlencoded") =>
      fetch(`http://127.0.0.1:${server.addr.port}/device_authorization`, {
        method: "POST",
        headers: { "Content-Type": type },
        body,
      });
    try {
      const before = await kvText(t.kv);
      const long = "c".repeat(MAX_QUERY_PARAMETER_LENGTH + 1);
      for (
        const body of [
          new URLSearchParams({ client_id: long }),
          new URLSearchParams({ client_id: "agent", scope: "mcp:tools ".repeat(500) }),
        ]
      ) {
        const answer = await assertError(await post(body), 400, "invalid_request");
        assert.match(answer.error_description ?? "", /exceeds 4096 characters/);
      }
      const json = await post(JSON.stringify({ client_id: long }), "application/json");
      await assertError(json, 400, "invalid_request");
      assert.equal(await kvText(t.kv), before, "nothing written to the store");
      assert.ok(logged.every((line) => line.length < 4096), "no log line carries it");
      assert.ok(!logged.some((line) => line.includes("device authorization started")));
      // As long as /authorize takes is taken.
      const atLimit = "c".repeat(MAX_QUERY_PARAMETER_LENGTH);
      const taken = await post(new URLSearchParams({ client_id: atLimit }));
      assert.equal(taken.status, 200, await taken.text());
    } finally {
      await server.shutdown();
    }
  }, { logger: createLogger((line) => logged.push(line)) });
});

Deno.test("device authorization: an unknown client is accepted under the spec's policy, 401 under registered", async () => {
  await withApp(async (t) => {
    await start(t, "never-registered");
  });
  const envs: Record<string, string>[] = [
    { REDIRECT_URI_POLICY: "registered" },
    { ...STRICT, DEVICE_AUTHORIZATION: "on" },
  ];
  for (const env of envs) {
    await withApp(async (t) => {
      await assertError(
        await deviceAuthorization(t, { client_id: "never-registered" }),
        401,
        "invalid_client",
      );
      await start(t, await deviceClient(t));
    }, { env });
  }
});

Deno.test("device authorization: a machine client's id → 400 unauthorized_client under every policy, nothing stored", async () => {
  const envs: Record<string, string>[] = [{}, { REDIRECT_URI_POLICY: "registered" }];
  for (const env of envs) {
    await withApp(async (t) => {
      const { client_id } = await addClient(t.store, { id: "nightly-report" });
      await assertError(
        await deviceAuthorization(t, { client_id }),
        400,
        "unauthorized_client",
        /machine client's: its only grant is client_credentials/,
      );
      assert.equal(await countRecords(t.kv, "device"), 0);
    }, { env });
  }
});

Deno.test("device code grant: under REDIRECT_URI_POLICY=registered a client deleted since issuance gets 401, as the code grant", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code } = await start(t, clientId);
    // `clients delete` before the user signed in: no session of it to end yet.
    assert.ok(await t.store.deleteClient(clientId));
    await approve(t, device_code);
    await assertError(await pollToken(t, clientId, device_code), 401, "invalid_client");
    assert.ok(await t.store.getDeviceAuthorization(device_code), "nothing spent");
  }, { env: { REDIRECT_URI_POLICY: "registered" } });
});

Deno.test("device authorization: registration asks for the grant by name; off, it cannot", async () => {
  await withApp(async (t) => {
    const response = await t.app(
      new Request(`${TEST_BASE}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:9999/callback"] }),
      }),
    );
    const body = await response.json();
    assert.deepEqual(body.grant_types, ["authorization_code", "refresh_token"]);
  });
  await withApp(async (t) => {
    await assertError(
      await t.app(
        new Request(`${TEST_BASE}/register`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify(DEVICE),
        }),
      ),
      400,
      "invalid_client_metadata",
    );
  }, { env: { DEVICE_AUTHORIZATION: "off" } });
});

Deno.test("device authorization: metadata lists the endpoint and the grant only when on", async () => {
  const metadataOf = async (t: TestApp) =>
    await (await t.app(new Request(`${TEST_BASE}/.well-known/oauth-authorization-server`))).json();
  await withApp(async (t) => {
    const metadata = await metadataOf(t);
    assert.equal(metadata.device_authorization_endpoint, `${TEST_BASE}/device_authorization`);
    assert.ok(metadata.grant_types_supported.includes(DEVICE_CODE_GRANT_TYPE));
  });
  const envs: Record<string, string>[] = [
    { DEVICE_AUTHORIZATION: "off" },
    STRICT,
  ];
  for (const env of envs) {
    await withApp(async (t) => {
      const metadata = await metadataOf(t);
      assert.equal(metadata.device_authorization_endpoint, undefined);
      assert.deepEqual(metadata.grant_types_supported, ["authorization_code", "refresh_token"]);
      const endpoint = await deviceAuthorization(t, { client_id: "any" });
      assert.equal(endpoint.status, 404);
      await endpoint.body?.cancel();
      await assertError(
        await pollToken(t, "any", "any-device-code"),
        400,
        "unsupported_grant_type",
      );
    }, { env: { BASE_URL: TEST_BASE, ...env } });
  }
  await withApp(async (t) => {
    assert.equal(
      (await metadataOf(t)).device_authorization_endpoint,
      `${TEST_BASE}/device_authorization`,
    );
  }, { env: { ...STRICT, DEVICE_AUTHORIZATION: "on" } });
});

Deno.test("device code grant: pending, slow_down growing from the previous poll, then tokens once", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code } = await start(t, clientId);
    await assertError(await pollToken(t, clientId, device_code), 400, "authorization_pending");
    t.clock.advance(4_999);
    await assertError(await pollToken(t, clientId, device_code), 400, "slow_down");
    // The interval is 10 s now, measured from that poll.
    t.clock.advance(9_999);
    await assertError(await pollToken(t, clientId, device_code), 400, "slow_down");
    t.clock.advance(15_000);
    await assertError(await pollToken(t, clientId, device_code), 400, "authorization_pending");
    await assertError(await pollToken(t, "another-client", device_code), 400, "invalid_grant");
    await assertError(await pollToken(t, clientId, "not-a-device-code"), 400, "invalid_grant");
    await assertError(
      await token(t, { grant_type: DEVICE_CODE_GRANT_TYPE, client_id: clientId }),
      400,
      "invalid_request",
    );

    await approve(t, device_code);
    t.clock.advance(15_000);
    const issued = await pollToken(t, clientId, device_code);
    const body = await issued.json();
    assert.equal(issued.status, 200, JSON.stringify(body));
    assert.equal(body.token_type, "Bearer");
    assert.ok(body.access_token && body.refresh_token);
    t.clock.advance(15_000);
    await assertError(await pollToken(t, clientId, device_code), 400, "invalid_grant");

    // The same refresh rotation as the code grant's session.
    const refreshed = await token(t, {
      grant_type: "refresh_token",
      refresh_token: body.refresh_token,
      client_id: clientId,
    });
    assert.equal(refreshed.status, 200, await refreshed.clone().text());
    assert.notEqual((await refreshed.json()).refresh_token, body.refresh_token);
  });
});

Deno.test("device code grant: a poll that loses a race answers slow_down and the interval grows", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code } = await start(t, clientId);
    await assertError(await pollToken(t, clientId, device_code), 400, "authorization_pending");
    t.clock.advance(5_000);
    const answers = await Promise.all(
      Array.from({ length: 5 }, async () => (await pollToken(t, clientId, device_code)).json()),
    );
    const errors = answers.map((answer) => answer.error);
    assert.equal(
      errors.filter((error) => error === "authorization_pending").length,
      1,
      `${errors}`,
    );
    assert.ok(errors.includes("slow_down"), `${errors}`);
    // RFC 8628 §3.5: each slow_down adds 5 s for every later poll, so 9.999 s is too soon.
    t.clock.advance(9_999);
    await assertError(await pollToken(t, clientId, device_code), 400, "slow_down");
  });
});

Deno.test("device code grant: denied answers access_denied, then the code is gone", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code } = await start(t, clientId);
    await deny(t, device_code);
    await assertError(await pollToken(t, clientId, device_code), 400, "access_denied");
    t.clock.advance(10_000);
    await assertError(await pollToken(t, clientId, device_code), 400, "invalid_grant");
  });
});

Deno.test("device code grant: past expires_in answers expired_token, then invalid_grant", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code, expires_in } = await start(t, clientId);
    t.clock.advance(expires_in * 1000 + 1);
    await assertError(await pollToken(t, clientId, device_code), 400, "expired_token");
    await assertError(await pollToken(t, clientId, device_code), 400, "invalid_grant");
  });
});

Deno.test("device code grant: 20 parallel polls of an approved code, exactly one gets tokens", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code } = await start(t, clientId);
    await approve(t, device_code);
    const results = await Promise.all(
      Array.from({ length: 20 }, async () => {
        const response = await pollToken(t, clientId, device_code);
        return { status: response.status, body: await response.json() };
      }),
    );
    assertNo500(results);
    const winners = results.filter((result) => result.status === 200);
    assert.equal(winners.length, 1, JSON.stringify(results));
    for (const loser of results.filter((result) => result.status !== 200)) {
      assert.equal(loser.status, 400);
      assert.ok(["invalid_grant", "slow_down"].includes(loser.body.error), JSON.stringify(loser));
    }
  });
});

Deno.test("device authorization: oauth4webapi's device-flow functions as the client", async () => {
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const options = {
      [oauth.customFetch]: (url: string, init: RequestInit) => t.app(new Request(url, init)),
      [oauth.allowInsecureRequests]: true,
    };
    const as = await oauth.processDiscoveryResponse(
      new URL(TEST_BASE),
      await oauth.discoveryRequest(new URL(TEST_BASE), { algorithm: "oauth2", ...options }),
    );
    const client: oauth.Client = { client_id: clientId, token_endpoint_auth_method: "none" };
    const auth = oauth.None();
    const started = await oauth.processDeviceAuthorizationResponse(
      as,
      client,
      await oauth.deviceAuthorizationRequest(as, client, auth, { scope: "mcp:tools" }, options),
    );
    assert.equal(started.verification_uri, `${TEST_BASE}/device`);
    await assert.rejects(
      async () =>
        await oauth.processDeviceCodeResponse(
          as,
          client,
          await oauth.deviceCodeGrantRequest(as, client, auth, started.device_code, options),
        ),
      (error: oauth.ResponseBodyError) => error.error === "authorization_pending",
    );
    await approve(t, started.device_code);
    t.clock.advance(started.interval! * 1000);
    const tokens = await oauth.processDeviceCodeResponse(
      as,
      client,
      await oauth.deviceCodeGrantRequest(as, client, auth, started.device_code, options),
    );
    assert.equal(tokens.token_type, "bearer");
    assert.ok(tokens.access_token && tokens.refresh_token);
  });
});

Deno.test("device authorization: counted and logged when started, expired", async () => {
  const lines: { message: string; fields?: Record<string, unknown> }[] = [];
  const logger = {
    info: (message: string, fields?: Record<string, unknown>) => lines.push({ message, fields }),
    warn() {},
    error() {},
  };
  await withApp(async (t) => {
    const clientId = await deviceClient(t);
    const { device_code } = await start(t, clientId);
    t.clock.advance(601_000);
    await assertError(await pollToken(t, clientId, device_code), 400, "expired_token");
    const audited = lines.filter((line) => line.message.startsWith("device authorization"));
    assert.deepEqual(
      audited.map((line) => [line.message, line.fields?.clientId]),
      [["device authorization started", clientId], ["device authorization expired", clientId]],
    );
    const metrics = await (await t.app(
      new Request(`${TEST_BASE}/metrics`, {
        headers: { Authorization: `Bearer ${METRICS_TOKEN}` },
      }),
    )).text();
    for (
      const [outcome, count] of [["started", 1], ["approved", 0], ["denied", 0], ["expired", 1]]
    ) {
      assert.match(
        metrics,
        new RegExp(
          `^gitlab_mcp_auth_device_authorizations_total\\{outcome="${outcome}"\\} ${count}$`,
          "m",
        ),
      );
    }
  }, { logger, env: { METRICS_TOKEN } });
});

Deno.test("device authorization: a metadata document client must list the grant; a device-only one needs no redirect_uris", async () => {
  const documents: Record<string, unknown> = {
    "https://agent.example/device.json": {
      client_id: "https://agent.example/device.json",
      client_name: "Agent",
      grant_types: [DEVICE_CODE_GRANT_TYPE],
      token_endpoint_auth_method: "none",
    },
    "https://agent.example/browser.json": {
      client_id: "https://agent.example/browser.json",
      client_name: "Browser app",
      redirect_uris: ["http://127.0.0.1:9999/callback"],
      token_endpoint_auth_method: "none",
    },
  };
  const clientMetadataFetcher = {
    fetchDocument: (url: URL) => Promise.resolve({ body: JSON.stringify(documents[url.href]) }),
  };
  const envs: Record<string, string>[] = [{}, { REDIRECT_URI_POLICY: "registered" }];
  for (const env of envs) {
    await withApp(async (t) => {
      await start(t, "https://agent.example/device.json");
      await assertError(
        await deviceAuthorization(t, { client_id: "https://agent.example/browser.json" }),
        400,
        "unauthorized_client",
      );
    }, { env, clientMetadataFetcher });
  }
});

Deno.test({
  name:
    "device code grant: 20 parallel polls of an approved code on PostgreSQL, exactly one gets tokens",
  ignore: ignorePostgresTests,
  async fn() {
    const url = await (await sharedPostgres()).createDatabase();
    const opened = await openDatabase({ databaseUrl: url, databasePoolSize: 8 });
    const t = await makeTestAppOn(opened.database);
    try {
      const clientId = await deviceClient(t);
      const { device_code } = await start(t, clientId);
      await approve(t, device_code);
      const results = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const response = await pollToken(t, clientId, device_code);
          return { status: response.status, body: await response.json() };
        }),
      );
      assertNo500(results);
      assert.equal(results.filter((result) => result.status === 200).length, 1);
      for (const loser of results.filter((result) => result.status !== 200)) {
        assert.ok(["invalid_grant", "slow_down"].includes(loser.body.error), JSON.stringify(loser));
      }
    } finally {
      t.close();
      await opened.close();
    }
  },
});
