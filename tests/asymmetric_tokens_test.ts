/**
 * ES256/EdDSA access tokens over the real app: their header names the signing key, their
 * claims are today's plus `jti` and `client_id`, the JWKS publishes public keys only, the
 * metadata names it, rotation keeps old tokens valid until their key is removed, and the
 * gateway refuses an unknown kid, a removed key and any other algorithm. HS256 is unchanged.
 */

import assert from "node:assert/strict";
import {
  createLocalJWKSet,
  decodeJwt,
  decodeProtectedHeader,
  type JSONWebKeySet,
  jwtVerify,
  SignJWT,
} from "jose";
import {
  FakeClock,
  FakeUpstream,
  issueTokens,
  makeTestApp,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { type Algorithm, freshKeys, signingEnv } from "./_signing_keys.ts";
import type { PrivateSigningJwk } from "../src/keys/signing_keys.ts";
import type { Json } from "./_service.ts";

const SPEC_CLAIMS = ["aud", "exp", "gitlab_user", "iat", "iss", "resource", "scope", "sid", "sub"];

async function getJson(t: TestApp, path: string): Promise<{ response: Response; body: Json }> {
  const response = await t.app(new Request(`${TEST_BASE}${path}`));
  return { response, body: await response.json() };
}

/** An MCP server that accepts everything the gateway lets through. */
function startAcceptingUpstream(): { url: string; close(): Promise<void> } {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json({ jsonrpc: "2.0", id: 1, result: {} }),
  );
  return { url: `http://127.0.0.1:${server.addr.port}/mcp`, close: () => server.shutdown() };
}

function gatewayStatus(t: TestApp, token: string): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/mcp`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${token}`,
        Accept: "application/json, text/event-stream",
        "Content-Type": "application/json",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
    }),
  );
}

async function assertRefused(t: TestApp, token: string, why: string): Promise<void> {
  const response = await gatewayStatus(t, token);
  assert.equal(response.status, 401, why);
  assert.equal((await response.json()).error, "invalid_token", why);
  assert.match(response.headers.get("www-authenticate") ?? "", /error="invalid_token"/, why);
}

for (const algorithm of ["ES256", "EdDSA"] as Algorithm[]) {
  Deno.test(`${algorithm}: tokens name their key, keep the spec's claims, add jti and client_id; the JWKS verifies them`, async () => {
    const keys = await freshKeys(algorithm, 2);
    const t = await makeTestApp({ env: signingEnv(algorithm, keys) });
    try {
      const issued = await issueTokens(t);
      const header = decodeProtectedHeader(issued.access_token);
      assert.deepEqual(header, { alg: algorithm, typ: "at+jwt", kid: keys[0].kid });
      const claims = decodeJwt(issued.access_token);
      assert.deepEqual(Object.keys(claims).sort(), [...SPEC_CLAIMS, "client_id", "jti"].sort());
      assert.equal(claims.client_id, claims.aud, "aud is the client id by default");
      assert.equal(typeof claims.jti, "string");
      assert.notEqual(decodeJwt((await issueTokens(t)).access_token).jti, claims.jti);

      const jwks = await getJson(t, "/.well-known/jwks.json");
      assert.equal(jwks.response.status, 200);
      assert.equal(jwks.response.headers.get("cache-control"), "public, max-age=300");
      assert.deepEqual(
        jwks.body.keys.map((key: PrivateSigningJwk) => key.kid),
        keys.map((k) => k.kid),
      );
      for (const key of jwks.body.keys) {
        assert.equal(key.d, undefined, "never the private part");
        assert.equal(key.alg, algorithm);
        assert.equal(key.use, "sig");
      }
      const { payload } = await jwtVerify(
        issued.access_token,
        createLocalJWKSet(jwks.body as JSONWebKeySet),
        {
          issuer: TEST_BASE,
          algorithms: [algorithm],
          currentDate: new Date(t.clock.now()),
        },
      );
      assert.equal(payload.sid, claims.sid);

      const metadata = await getJson(t, "/.well-known/oauth-authorization-server");
      assert.equal(metadata.body.jwks_uri, `${TEST_BASE}/.well-known/jwks.json`);
      assert.equal(metadata.body.introspection_endpoint, undefined);
    } finally {
      t.close();
    }
  });
}

Deno.test("HS256 (the default): an empty key set, no jwks_uri, and exactly the spec's claims", async () => {
  const t = await makeTestApp();
  try {
    const jwks = await getJson(t, "/.well-known/jwks.json");
    assert.equal(jwks.response.status, 200);
    assert.deepEqual(jwks.body, { keys: [] });
    const metadata = await getJson(t, "/.well-known/oauth-authorization-server");
    assert.equal("jwks_uri" in metadata.body, false);
    const { access_token } = await issueTokens(t);
    assert.deepEqual(decodeProtectedHeader(access_token), { alg: "HS256", typ: "JWT" });
    assert.deepEqual(Object.keys(decodeJwt(access_token)).sort(), SPEC_CLAIMS);
  } finally {
    t.close();
  }
});

Deno.test("rotation: a new key published second, then moved first; old tokens verify until their key is removed", async () => {
  const [old, next] = await freshKeys("ES256", 2);
  const upstream = startAcceptingUpstream();
  const dir = await Deno.makeTempDir();
  const clock = new FakeClock();
  const gitlab = new FakeUpstream();
  // Each step is the service restarted with other keys, over the same KV (sessions stay).
  const step = (keys: PrivateSigningJwk[]) =>
    makeTestApp({
      env: { ...signingEnv("ES256", keys), MCP_UPSTREAM_URL: upstream.url },
      kvPath: `${dir}/kv`,
      clock,
      upstream: gitlab,
    });
  const apps: TestApp[] = [];
  try {
    const before = await step([old]);
    apps.push(before);
    const oldToken = (await issueTokens(before)).access_token;

    const published = await step([old, next]);
    apps.push(published);
    assert.equal(decodeProtectedHeader((await issueTokens(published)).access_token).kid, old.kid);
    assert.equal((await gatewayStatus(published, oldToken)).status, 200);

    const moved = await step([next, old]);
    apps.push(moved);
    const newToken = (await issueTokens(moved)).access_token;
    assert.equal(decodeProtectedHeader(newToken).kid, next.kid);
    assert.equal((await gatewayStatus(moved, oldToken)).status, 200, "old key still verifies");
    assert.equal((await gatewayStatus(moved, newToken)).status, 200);
    assert.equal((await gatewayStatus(published, newToken)).status, 200, "published before use");

    const removed = await step([next]);
    apps.push(removed);
    await assertRefused(removed, oldToken, "a removed key");
    assert.equal((await gatewayStatus(removed, newToken)).status, 200);
    assert.deepEqual(
      (await getJson(removed, "/.well-known/jwks.json")).body.keys.map((k: { kid: string }) =>
        k.kid
      ),
      [next.kid],
    );
  } finally {
    for (const app of apps) app.close();
    await upstream.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("gateway under EdDSA: an unknown kid, a foreign key, HS256 with our secret, ES256 and alg none are refused", async () => {
  const [ours] = await freshKeys("EdDSA", 1);
  const [stranger] = await freshKeys("EdDSA", 1);
  const [es] = await freshKeys("ES256", 1);
  const upstream = startAcceptingUpstream();
  const t = await makeTestApp({
    env: { ...signingEnv("EdDSA", [ours]), MCP_UPSTREAM_URL: upstream.url },
  });
  try {
    const genuine = (await issueTokens(t)).access_token;
    assert.equal((await gatewayStatus(t, genuine)).status, 200);
    const claims = decodeJwt(genuine);
    const signed = async (alg: string, key: CryptoKey | Uint8Array, kid?: string) =>
      await new SignJWT(claims).setProtectedHeader({ alg, typ: "JWT", ...(kid ? { kid } : {}) })
        .sign(key);
    const { importJWK } = await import("jose");
    const strangerKey = await importJWK({ ...stranger, alg: "EdDSA" }, "EdDSA") as CryptoKey;
    const esKey = await importJWK({ ...es, alg: "ES256" }, "ES256") as CryptoKey;
    const ourKey = await importJWK({ ...ours, alg: "EdDSA" }, "EdDSA") as CryptoKey;
    assert.equal(
      (await gatewayStatus(t, await signed("EdDSA", ourKey, ours.kid))).status,
      200,
      "typ JWT, as tokens signed before at+jwt say, still verifies",
    );
    await assertRefused(t, await signed("EdDSA", strangerKey, "somebody-else"), "unknown kid");
    await assertRefused(t, await signed("EdDSA", strangerKey, ours.kid), "our kid, not our key");
    await assertRefused(t, await signed("EdDSA", strangerKey), "no kid");
    await assertRefused(
      t,
      await signed("HS256", new TextEncoder().encode(TEST_SECRET), ours.kid),
      "HS256 with JWT_SECRET",
    );
    await assertRefused(t, await signed("ES256", esKey, ours.kid), "another algorithm");
    const [head, body] = genuine.split(".");
    const none = `${
      btoa(JSON.stringify({ alg: "none", kid: ours.kid })).replace(/=+$/, "")
    }.${body}.`;
    await assertRefused(t, none, "alg none");
    assert.ok(head);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("revocation of an ES256 access token ends its session", async () => {
  const keys = await freshKeys("ES256", 1);
  const t = await makeTestApp({ env: signingEnv("ES256", keys) });
  try {
    const issued = await issueTokens(t);
    const sid = decodeJwt(issued.access_token).sid as string;
    assert.ok(await t.store.getSession(sid));
    const response = await t.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: issued.access_token }),
      }),
    );
    assert.equal(response.status, 200);
    assert.equal(await t.store.getSession(sid), null);
  } finally {
    t.close();
  }
});
