/**
 * Operator-registered machine clients and the client_credentials grant (issue 37 §2), over HTTP
 * against the real app: oauth4webapi's client-credentials request with `PrivateKeyJwt` (ES256,
 * RS256, EdDSA), `ClientSecretBasic` and `ClientSecretPost`; every way authentication fails is
 * 401 `invalid_client`; a client without a rule is `unauthorized_client`; without
 * MACHINE_ACCESS_FILE nothing of this is served and the metadata is as before.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import * as oauth from "oauth4webapi";
import {
  assertError,
  exchange,
  FakeClock,
  issueCode,
  kvText,
  makeTestApp,
  readJsonAnswer,
  refresh,
  register,
  TEST_BASE,
  type TestApp,
  token,
} from "./_helpers.ts";
import {
  addClient,
  assertion,
  assertionForm,
  basic,
  type ClientKey,
  clientKeyPair,
  writeAccessFile,
} from "./_machine_clients.ts";
import type { LogFields } from "../src/logger.ts";

const INSECURE = { [oauth.allowInsecureRequests]: true } as const;

/** The app with MACHINE_ACCESS_FILE giving `robot` and `vault` the server at /mcp. */
async function machineApp(logs?: LogFields[], env: Record<string, string> = {}): Promise<TestApp> {
  const path = await writeAccessFile([
    { client_id: "robot", servers: ["default"] },
    { client_id: "vault", servers: ["default"] },
  ]);
  return await makeTestApp({
    env: { MACHINE_ACCESS_FILE: path, ...env },
    // oauth4webapi signs its assertions with the wall clock's time.
    clock: new FakeClock(Date.now()),
    logger: logs ? recordingLogger(logs) : undefined,
  });
}

function recordingLogger(lines: LogFields[]) {
  const record = (level: string) => (message: string, fields: LogFields = {}) =>
    void lines.push({ level, message, ...fields });
  return {
    debug: record("debug"),
    info: record("info"),
    warn: record("warn"),
    error: record("error"),
  };
}

async function metadata(t: TestApp) {
  const response = await t.app(
    new Request(`${TEST_BASE}/.well-known/oauth-authorization-server`),
  );
  return (await readJsonAnswer(response)).body;
}

/** oauth4webapi's view of the service, its requests answered by the app in process. */
async function discovered(t: TestApp) {
  const options = {
    ...INSECURE,
    [oauth.customFetch]: (url: string, init: RequestInit) => t.app(new Request(url, init)),
  };
  const issuer = new URL(TEST_BASE);
  const as = await oauth.processDiscoveryResponse(
    issuer,
    await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...options }),
  );
  return { as, options };
}

async function withMachineApp(fn: (t: TestApp) => Promise<void>, logs?: LogFields[]) {
  const t = await machineApp(logs);
  try {
    await fn(t);
  } finally {
    t.close();
  }
}

Deno.test("client credentials: without MACHINE_ACCESS_FILE the grant is unsupported and metadata is as before", async () => {
  const t = await makeTestApp();
  try {
    const doc = await metadata(t);
    assert.ok(!doc.grant_types_supported.includes("client_credentials"));
    assert.deepEqual(doc.token_endpoint_auth_methods_supported, ["none"]);
    assert.equal(doc.token_endpoint_auth_signing_alg_values_supported, undefined);
    const { client_id, client_secret } = await addClient(t.store, { id: "robot", secret: true });
    await assertError(
      await token(t, { grant_type: "client_credentials" }, {
        headers: basic(client_id, client_secret ?? ""),
      }),
      400,
      "unsupported_grant_type",
    );
  } finally {
    t.close();
  }
});

Deno.test("client credentials: with MACHINE_ACCESS_FILE metadata lists the grant, the four methods and the assertion algorithms", async () => {
  await withMachineApp(async (t) => {
    const doc = await metadata(t);
    assert.ok(doc.grant_types_supported.includes("client_credentials"));
    assert.deepEqual(doc.token_endpoint_auth_methods_supported, [
      "none",
      "client_secret_basic",
      "client_secret_post",
      "private_key_jwt",
    ]);
    assert.deepEqual(doc.token_endpoint_auth_signing_alg_values_supported, [
      "ES256",
      "RS256",
      "EdDSA",
      "Ed25519",
    ]);
  });
});

Deno.test("client credentials: without BASE_URL private_key_jwt is neither accepted nor listed, so no Host picks an assertion's audience; secrets still work", async () => {
  const t = await machineApp(undefined, { BASE_URL: "" });
  try {
    const key = await clientKeyPair();
    await addClient(t.store, { id: "robot", jwks: { keys: [key.jwk] } });
    // A hostile server replays an assertion the client made for it, naming its own host.
    const hostile = "http://hostile.example";
    const replayed = await assertion(key, "robot", t.clock.now(), { aud: hostile });
    await assertError(
      await token(t, assertionForm(replayed), { url: `${hostile}/token` }),
      401,
      "invalid_client",
      /private_key_jwt is not served: this server has no BASE_URL/,
    );
    const ours = await assertion(key, "robot", t.clock.now());
    await assertError(
      await token(t, assertionForm(ours)),
      401,
      "invalid_client",
      /private_key_jwt is not served/,
    );
    const { client_id, client_secret } = await addClient(t.store, { id: "vault", secret: true });
    const issued = await token(t, { grant_type: "client_credentials" }, {
      headers: basic(client_id, client_secret ?? ""),
    });
    assert.equal(issued.status, 200, await issued.text());
    const doc = await metadata(t);
    assert.deepEqual(doc.token_endpoint_auth_methods_supported, [
      "none",
      "client_secret_basic",
      "client_secret_post",
    ]);
    assert.equal(doc.token_endpoint_auth_signing_alg_values_supported, undefined);
  } finally {
    t.close();
  }
});

for (const alg of ["ES256", "RS256", "EdDSA"] as const) {
  Deno.test(`client credentials: oauth4webapi's PrivateKeyJwt (${alg}) gets a token for client:<id>, no refresh token`, async () => {
    const logs: LogFields[] = [];
    await withMachineApp(async (t) => {
      const key = await clientKeyPair(alg);
      await addClient(t.store, { id: "robot", jwks: { keys: [key.jwk] } });
      const { as, options } = await discovered(t);
      const client: oauth.Client = { client_id: "robot" };
      const response = await oauth.clientCredentialsGrantRequest(
        as,
        client,
        oauth.PrivateKeyJwt({ key: key.privateKey, kid: key.kid }),
        new URLSearchParams({ resource: `${TEST_BASE}/mcp` }),
        options,
      );
      const tokens = await oauth.processClientCredentialsResponse(as, client, response);
      assert.equal(tokens.token_type, "bearer");
      assert.equal(tokens.refresh_token, undefined);
      const claims = decodeJwt(tokens.access_token);
      assert.equal(claims.sub, "client:robot");
      assert.equal(claims.resource, `${TEST_BASE}/mcp`);
      assert.equal(claims.iss, TEST_BASE);
      const line = logs.find((l) => l.grant === "client_credentials");
      assert.equal(line?.caller, "client");
      assert.equal(line?.clientId, "robot");
      assert.ok(!JSON.stringify(logs).includes(tokens.access_token), "no token in the logs");
      const counted = { grant_type: "client_credentials", outcome: "issued" } as const;
      assert.equal(t.deps.metrics.tokenGrants.get(counted), 1);
    }, logs);
  });
}

for (const method of ["ClientSecretBasic", "ClientSecretPost"] as const) {
  Deno.test(`client credentials: oauth4webapi's ${method} with the secret clients add printed`, async () => {
    await withMachineApp(async (t) => {
      const { client_id, client_secret } = await addClient(t.store, { secret: true });
      assert.ok(client_secret && client_secret.length >= 43, "a 256-bit secret");
      // A rule for the generated id, read again as SIGHUP would.
      await Deno.writeTextFile(
        t.config.machineAccessFile?.path ?? "",
        JSON.stringify({ clients: [{ client_id, servers: ["default"] }] }),
      );
      assert.equal(t.deps.machineAccess.reload().kind, "reloaded");
      const { as, options } = await discovered(t);
      const client: oauth.Client = { client_id };
      const response = await oauth.clientCredentialsGrantRequest(
        as,
        client,
        oauth[method](client_secret),
        new URLSearchParams(),
        options,
      );
      const tokens = await oauth.processClientCredentialsResponse(as, client, response);
      assert.equal(decodeJwt(tokens.access_token).sub, `client:${client_id}`);
      assert.equal(tokens.refresh_token, undefined);
      assert.ok(!(await kvText(t.kv)).includes(client_secret), "the secret is not stored");
    });
  });
}

Deno.test("client credentials: every failure of secret authentication is 401 invalid_client", async () => {
  await withMachineApp(async (t) => {
    const { client_secret = "" } = await addClient(t.store, { id: "vault", secret: true });
    const key = await clientKeyPair();
    await addClient(t.store, { id: "robot", jwks: { keys: [key.jwk] } });
    const grant = { grant_type: "client_credentials" };
    const basicChallenge = async (response: Response, description?: RegExp) => {
      const challenge = response.headers.get("www-authenticate") ?? "";
      await assertError(response, 401, "invalid_client", description);
      assert.match(challenge, /^Basic realm=/);
    };
    await basicChallenge(await token(t, grant), /needs client authentication/);
    await basicChallenge(await token(t, { ...grant, client_id: "vault" }));
    await basicChallenge(await token(t, grant, { headers: basic("vault", "wrong") }));
    await basicChallenge(await token(t, grant, { headers: basic("nobody", client_secret) }));
    await basicChallenge(await token(t, grant, { headers: { Authorization: "Basic !!!" } }));
    await basicChallenge(
      await token(t, grant, { headers: { Authorization: `Basic ${btoa("x")}` } }),
    );
    await basicChallenge(
      await token(t, { ...grant, client_id: "robot" }, { headers: basic("vault", client_secret) }),
      /differs/,
    );
    // A client with keys has no secret, whatever is sent.
    await basicChallenge(await token(t, grant, { headers: basic("robot", "") }));
    // A 401 names a scheme to authenticate with (RFC 9110 §15.5.2), whatever method failed.
    await basicChallenge(await token(t, { ...grant, client_id: "vault", client_secret: "wrong" }));
    await basicChallenge(await token(t, { ...grant, client_secret }), /needs client_id/);
    await assertError(
      await token(t, { ...grant, client_id: "vault", client_secret }, {
        headers: basic("vault", client_secret),
      }),
      400,
      "invalid_request",
      /one client authentication method/,
    );
  });
});

/** Posts a client_credentials request with an assertion; the answer. */
async function withAssertion(t: TestApp, key: ClientKey, overrides = {}, header = {}) {
  const signed = await assertion(key, "robot", t.clock.now(), overrides, header);
  return await token(t, assertionForm(signed));
}

Deno.test("client credentials: every failed check of a client assertion is 401 invalid_client naming the check", async () => {
  await withMachineApp(async (t) => {
    const key = await clientKeyPair("ES256", "k1");
    const other = await clientKeyPair("ES256", "k1");
    await addClient(t.store, { id: "robot", jwks: { keys: [key.jwk] } });
    const now = Math.floor(t.clock.now() / 1000);
    const refused = async (response: Response, description: RegExp) => {
      assert.match(response.headers.get("www-authenticate") ?? "", /^Basic realm=/);
      const body = await assertError(response, 401, "invalid_client", description);
      assert.ok(!body.error_description.includes(String(key.jwk.x)), "no key material");
    };
    await refused(await withAssertion(t, other), /signature/);
    await refused(await withAssertion(t, key, { aud: "https://elsewhere.example" }), /aud/);
    await refused(await withAssertion(t, key, { iss: "someone" }), /iss/);
    await refused(
      await withAssertion(t, key, { sub: "vault", iss: "vault" }),
      /No client with registered keys/,
    );
    await refused(await withAssertion(t, key, { sub: undefined }), /no sub/);
    await refused(await withAssertion(t, key, { exp: now - 120 }), /exp/);
    await refused(await withAssertion(t, key, { exp: now + 301 }), /more than 300 s ahead/);
    await refused(await withAssertion(t, key, { exp: undefined }), /exp/);
    await refused(await withAssertion(t, key, { jti: undefined }), /jti/);
    await refused(await withAssertion(t, key, { nbf: now + 600 }), /nbf/);
    await refused(await withAssertion(t, key, { iat: now + 600 }), /iat/);
    await refused(await withAssertion(t, key, {}, { kid: "unknown" }), /No key registered/);
    const hs256 = await new (await import("jose")).SignJWT({
      iss: "robot",
      sub: "robot",
      aud: TEST_BASE,
      exp: now + 60,
      jti: "h",
    }).setProtectedHeader({ alg: "HS256" }).sign(new TextEncoder().encode("x".repeat(32)));
    await refused(await token(t, assertionForm(hs256)), /alg/);
    await refused(await token(t, assertionForm("not.a.jwt")), /not a JWT/);
    await refused(
      await token(t, {
        ...assertionForm(await assertion(key, "robot", t.clock.now())),
        client_assertion_type: "urn:other",
      }),
      /client_assertion_type/,
    );
    await refused(
      await token(t, {
        grant_type: "client_credentials",
        client_assertion_type: assertionForm("").client_assertion_type,
      }),
      /client_assertion is required/,
    );
    await refused(
      await token(
        t,
        assertionForm(await assertion(key, "robot", t.clock.now()), { client_id: "vault" }),
      ),
      /client_id differs/,
    );
  });
});

Deno.test("client credentials: aud may be the token endpoint, or an array naming the issuer", async () => {
  await withMachineApp(async (t) => {
    const key = await clientKeyPair();
    await addClient(t.store, { id: "robot", jwks: { keys: [key.jwk] } });
    for (const aud of [`${TEST_BASE}/token`, ["https://other.example", TEST_BASE]]) {
      const { status, body } = await readJsonAnswer(await withAssertion(t, key, { aud }));
      assert.equal(status, 200, JSON.stringify(body));
    }
  });
});

Deno.test("client credentials: a parameter sent without a value is as if omitted (RFC 6749 §3.2), for public and machine clients alike", async () => {
  await withMachineApp(async (t) => {
    const empty = { client_secret: "", resource: "", scope: "" };
    const exchanged = await readJsonAnswer(await exchange(t, await issueCode(t), empty));
    assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
    const refreshed = await readJsonAnswer(await refresh(t, exchanged.body.refresh_token, empty));
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
    const { client_id, client_secret } = await addClient(t.store, { id: "vault", secret: true });
    const issued = await readJsonAnswer(
      await token(t, { grant_type: "client_credentials", client_id: "", resource: "" }, {
        headers: basic(client_id, client_secret ?? ""),
      }),
    );
    assert.equal(issued.status, 200, JSON.stringify(issued.body));
  });
});

Deno.test("client credentials: an assertion is accepted once, also when presented twice at once", async () => {
  await withMachineApp(async (t) => {
    const key = await clientKeyPair();
    await addClient(t.store, { id: "robot", jwks: { keys: [key.jwk] } });
    const once = await assertion(key, "robot", t.clock.now());
    assert.equal((await token(t, assertionForm(once))).status, 200);
    await assertError(
      await token(t, assertionForm(once)),
      401,
      "invalid_client",
      /used before \(jti\)/,
    );

    const twice = await assertion(key, "robot", t.clock.now());
    const answers = await Promise.all([1, 2, 3].map(() => token(t, assertionForm(twice))));
    const statuses = answers.map((answer) => answer.status).sort();
    await Promise.all(answers.map((answer) => answer.body?.cancel()));
    assert.deepEqual(statuses, [200, 401, 401]);
  });
});

Deno.test("client credentials: a client without a rule is unauthorized_client; a resource outside its rule invalid_target", async () => {
  await withMachineApp(async (t) => {
    const key = await clientKeyPair();
    await addClient(t.store, { id: "stranger", jwks: { keys: [key.jwk] } });
    const signed = await assertion(key, "stranger", t.clock.now());
    await assertError(await token(t, assertionForm(signed)), 400, "unauthorized_client");
    const counted = { grant_type: "client_credentials", outcome: "unauthorized_client" } as const;
    assert.equal(t.deps.metrics.tokenGrants.get(counted), 1);

    await addClient(t.store, { id: "robot", jwks: { keys: [key.jwk] } });
    const elsewhere = await assertion(key, "robot", t.clock.now());
    await assertError(
      await token(t, assertionForm(elsewhere, { resource: "https://other.example/mcp" })),
      400,
      "invalid_target",
    );
    const scoped = await assertion(key, "robot", t.clock.now());
    await assertError(
      await token(t, assertionForm(scoped, { scope: "admin" })),
      400,
      "invalid_scope",
    );
    const narrow = await assertion(key, "robot", t.clock.now());
    const { body } = await readJsonAnswer(
      await token(t, assertionForm(narrow, { scope: "mcp:tools" })),
    );
    assert.equal(body.scope, "mcp:tools");
  });
});

Deno.test("client credentials: dynamic registration refuses the grant (400 invalid_client_metadata)", async () => {
  await withMachineApp(async (t) => {
    await assertError(
      await register(t, {
        redirect_uris: ["http://127.0.0.1:9999/cb"],
        grant_types: ["authorization_code", "client_credentials"],
      }),
      400,
      "invalid_client_metadata",
    );
  });
});

Deno.test("client credentials: clients add takes public ES256, RS256 and Ed25519 keys only", async () => {
  const { publicJwksOf } = await import("../src/clients/machine_keys.ts");
  const { exportJWK, generateKeyPair } = await import("jose");
  const es = await clientKeyPair("ES256", "es");
  const kept = await publicJwksOf(JSON.stringify({ keys: [es.jwk] }));
  assert.deepEqual(Object.keys(kept.keys[0]).sort(), ["crv", "kid", "kty", "x", "y"]);
  assert.equal((await publicJwksOf(JSON.stringify(es.jwk))).keys.length, 1, "one JWK");
  const refused = async (text: string, reason: RegExp) =>
    await assert.rejects(publicJwksOf(text), reason);
  await refused("not json", /not JSON/);
  await refused(JSON.stringify({ keys: [] }), /1 to 10 keys/);
  await refused(JSON.stringify(await exportJWK(es.privateKey)), /private/);
  await refused(JSON.stringify({ kty: "oct", k: "c2VjcmV0" }), /private \(or symmetric\)/);
  const p384 = await generateKeyPair("ES384", { extractable: true });
  await refused(JSON.stringify(await exportJWK(p384.publicKey)), /only EC P-256/);
  const rsa1024 = await crypto.subtle.generateKey(
    {
      name: "RSASSA-PKCS1-v1_5",
      modulusLength: 1024,
      publicExponent: new Uint8Array([1, 0, 1]),
      hash: "SHA-256",
    },
    true,
    ["sign", "verify"],
  );
  await refused(JSON.stringify(await exportJWK(rsa1024.publicKey)), /2048 bits/);
  await refused(JSON.stringify({ ...es.jwk, alg: "RS256" }), /does not fit/);
  await refused(JSON.stringify({ ...es.jwk, use: "enc" }), /use must be sig/);
  await refused(JSON.stringify({ ...es.jwk, x: "AAAA" }), /cannot be used/);
});

Deno.test("client credentials: the docs' example rule, as printed, admits its client", async () => {
  const docs = await Deno.readTextFile(new URL("../docs/mcp-clients.md", import.meta.url));
  const section = docs.slice(docs.indexOf("### Machine clients: client credentials"));
  const rule = section.match(/```yaml\n([\s\S]*?)```/)?.[1];
  assert.ok(rule, "the section has its yaml block");
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/machine-access.yaml`, rule);
  const t = await makeTestApp({ env: { MACHINE_ACCESS_FILE: `${dir}/machine-access.yaml` } });
  try {
    const { client_secret = "" } = await addClient(t.store, { id: "review-bot", secret: true });
    const answer = await token(t, {
      grant_type: "client_credentials",
      resource: `${TEST_BASE}/mcp`,
    }, { headers: basic("review-bot", client_secret) });
    const { status, body } = await readJsonAnswer(answer);
    assert.equal(status, 200, JSON.stringify(body));
  } finally {
    t.close();
    await Deno.remove(dir, { recursive: true });
  }
});
