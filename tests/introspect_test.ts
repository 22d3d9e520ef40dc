/**
 * `POST /introspect` (RFC 7662): 404 until INTROSPECTION_TOKENS is set, 401 for a wrong caller,
 * the live token's fields (its `resource` among them) for an access token whose session is alive
 * and `{active: false}` for anything else, rate-limited per caller, callers compared through the
 * shared constant-time helper.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { timingSafeEqual } from "../src/crypto.ts";
import { CALLER_TOKEN_EQUALS, createCallerCheck } from "../src/introspection/callers.ts";
import { createTokenSigner } from "../src/jwt.ts";
import { decodeJwt } from "jose";
import { issueTokens, makeTestApp, TEST_BASE, TEST_SECRET, type TestApp } from "./_helpers.ts";
import { freshKeys, signingEnv } from "./_signing_keys.ts";
import { addClient, basic, writeAccessFile } from "./_machine_clients.ts";

const CALLER = "resource-server-one-secret-of-32-bytes!!";
const OTHER_CALLER = "resource-server-two-secret-of-32-bytes!!";
const INTROSPECTION_ENV = { INTROSPECTION_TOKENS: `${CALLER}, ${OTHER_CALLER}` };
const ACTIVE_FIELDS = [
  "active",
  "aud",
  "client_id",
  "exp",
  "gitlab_user",
  "iat",
  "iss",
  "resource",
  "scope",
  "sid",
  "sub",
  "token_type",
];

function introspectRequest(
  t: TestApp,
  form: Record<string, string>,
  caller: string | null = CALLER,
): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/introspect`, {
      method: "POST",
      headers: {
        "Content-Type": "application/x-www-form-urlencoded",
        ...(caller === null ? {} : { Authorization: `Bearer ${caller}` }),
      },
      body: new URLSearchParams(form),
    }),
  );
}

async function introspected(t: TestApp, token: string, hint?: string) {
  const response = await introspectRequest(t, {
    token,
    ...(hint === undefined ? {} : { token_type_hint: hint }),
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("cache-control"), "no-store");
  return await response.json();
}

Deno.test("introspection: 404 and absent from the metadata while INTROSPECTION_TOKENS is unset", async () => {
  const t = await makeTestApp();
  try {
    const { access_token } = await issueTokens(t);
    const response = await introspectRequest(t, { token: access_token });
    assert.equal(response.status, 404);
    await response.body?.cancel();
    const metadata = await (await t.app(
      new Request(`${TEST_BASE}/.well-known/oauth-authorization-server`),
    )).json();
    assert.equal("introspection_endpoint" in metadata, false);
  } finally {
    t.close();
  }
});

Deno.test("introspection: callers need one of INTROSPECTION_TOKENS as Bearer (401 otherwise)", async () => {
  const t = await makeTestApp({ env: INTROSPECTION_ENV });
  try {
    const { access_token } = await issueTokens(t);
    for (
      const caller of [null, "", "wrong-but-long-enough-wrong-but-long-enough", CALLER + "x"]
    ) {
      const response = await introspectRequest(t, { token: access_token }, caller);
      assert.equal(response.status, 401, `caller ${caller}`);
      // RFC 6750 §3.1: no error code in the challenge of a request without a credential.
      assert.equal(
        response.headers.get("www-authenticate"),
        caller === null
          ? 'Bearer realm="introspection"'
          : 'Bearer realm="introspection", error="invalid_token"',
      );
      const body = await response.json();
      assert.equal(body.error, "invalid_token");
      assert.equal(body.active, undefined, "says nothing of the token");
    }
    const basic = await t.app(
      new Request(`${TEST_BASE}/introspect`, {
        method: "POST",
        headers: {
          "Content-Type": "application/x-www-form-urlencoded",
          Authorization: `Basic ${btoa(`rs:${CALLER}`)}`,
        },
        body: new URLSearchParams({ token: access_token }),
      }),
    );
    assert.equal(basic.status, 401, "another scheme is no credential of ours");
    assert.equal(basic.headers.get("www-authenticate"), 'Bearer realm="introspection"');
    await basic.body?.cancel();
    assert.equal((await introspected(t, access_token)).active, true);
    const metadata = await (await t.app(
      new Request(`${TEST_BASE}/.well-known/oauth-authorization-server`),
    )).json();
    assert.equal(metadata.introspection_endpoint, `${TEST_BASE}/introspect`);
  } finally {
    t.close();
  }
});

for (const [name, env] of [["HS256", {}], ["ES256", undefined]] as const) {
  Deno.test(`introspection (${name}): a live access token's fields, and {active:false} for anything else`, async () => {
    const t = await makeTestApp({
      env: { ...INTROSPECTION_ENV, ...(env ?? signingEnv("ES256", await freshKeys("ES256", 1))) },
    });
    try {
      const issued = await issueTokens(t);
      const claims = decodeJwt(issued.access_token);
      const active = await introspected(t, issued.access_token, "access_token");
      assert.deepEqual(Object.keys(active).sort(), ACTIVE_FIELDS);
      assert.deepEqual(active, {
        active: true,
        sub: claims.sub,
        client_id: claims.aud,
        scope: "mcp:tools mcp:resources",
        exp: claims.exp,
        iat: claims.iat,
        iss: TEST_BASE,
        aud: claims.aud,
        sid: claims.sid,
        gitlab_user: claims.gitlab_user,
        token_type: "Bearer",
        resource: `${TEST_BASE}/mcp`,
      });

      const foreign = await createTokenSigner(["some-other-secret-that-is-32-bytes-long!"]).sign(
        { ...claims, iss: TEST_BASE } as never,
        t.clock.now(),
        3600,
      );
      const inactive = [
        issued.refresh_token,
        "not-a-token",
        "a.b.c",
        issued.access_token.slice(0, -2),
        foreign,
        "x".repeat(20_000),
        // jose would drop the space and find the signature good: not a token all the same.
        `${issued.access_token.slice(0, -4)} ${issued.access_token.slice(-4)}`,
      ];
      for (const token of inactive) {
        assert.deepEqual(await introspected(t, token), { active: false }, token.slice(0, 40));
      }
      assert.deepEqual(await introspected(t, issued.refresh_token, "refresh_token"), {
        active: false,
      });

      t.clock.advance(3600 * 1000);
      assert.deepEqual(await introspected(t, issued.access_token), { active: false }, "expired");

      const live = await issueTokens(t);
      assert.equal((await introspected(t, live.access_token)).active, true);
      const revoked = await t.app(
        new Request(`${TEST_BASE}/revoke`, {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ token: live.refresh_token }),
        }),
      );
      assert.equal(revoked.status, 200);
      assert.deepEqual(await introspected(t, live.access_token), { active: false }, "revoked");
    } finally {
      t.close();
    }
  });
}

Deno.test("introspection: a request without a token is 400 invalid_request", async () => {
  const t = await makeTestApp({ env: INTROSPECTION_ENV });
  try {
    const response = await introspectRequest(t, { token_type_hint: "access_token" });
    assert.equal(response.status, 400);
    assert.equal((await response.json()).error, "invalid_request");
  } finally {
    t.close();
  }
});

Deno.test("introspection: rate-limited per caller, not per address", async () => {
  const t = await makeTestApp({ env: { ...INTROSPECTION_ENV, RATE_LIMIT_INTROSPECT: "3/60" } });
  try {
    const { access_token } = await issueTokens(t);
    for (let i = 0; i < 3; i++) assert.equal((await introspected(t, access_token)).active, true);
    const over = await introspectRequest(t, { token: access_token });
    assert.equal(over.status, 429);
    assert.ok(over.headers.get("retry-after"));
    await over.body?.cancel();
    const other = await introspectRequest(t, { token: access_token }, OTHER_CALLER);
    assert.equal(other.status, 200, "another caller has its own count");
    await other.body?.cancel();
  } finally {
    t.close();
  }
});

Deno.test("introspection: callers are compared with the shared constant-time helper, every one of them", () => {
  assert.equal(CALLER_TOKEN_EQUALS, timingSafeEqual);
  const compared: [string, string][] = [];
  const check = createCallerCheck([CALLER, OTHER_CALLER], (a, b) => {
    compared.push([a, b]);
    return timingSafeEqual(a, b);
  });
  assert.ok(check(CALLER));
  assert.equal(compared.length, 2, "no early exit on a match");
  assert.equal(check("nobody"), undefined);
  assert.equal(compared.length, 4);
  assert.ok(compared.every(([a, b]) => a.length === b.length), "digests, not raw tokens");
  assert.notEqual(check(CALLER), check(OTHER_CALLER));
});

Deno.test("introspection: INTROSPECTION_TOKENS needs tokens of at least 32 bytes", () => {
  const base = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET };
  // One token per line (as a file may hold them) is one token no header can carry: refused.
  for (const raw of ["short", `${CALLER},short`, " , ", `${CALLER}\n${OTHER_CALLER}`]) {
    assert.throws(
      () => loadConfig({ ...base, INTROSPECTION_TOKENS: raw }),
      (error) => error instanceof ConfigError && error.variable === "INTROSPECTION_TOKENS",
    );
  }
  assert.deepEqual(loadConfig({ ...base, ...INTROSPECTION_ENV }).introspectionTokens, [
    CALLER,
    OTHER_CALLER,
  ]);
});

Deno.test("introspect: a machine caller's live access token (client credentials) is inactive: its rule is the gateway's to enforce", async () => {
  const accessFile = await writeAccessFile([{ client_id: "robot", servers: ["default"] }]);
  const t = await makeTestApp({ env: { ...INTROSPECTION_ENV, MACHINE_ACCESS_FILE: accessFile } });
  try {
    const { client_id, client_secret } = await addClient(t.store, { id: "robot", secret: true });
    const response = await t.app(
      new Request(`${TEST_BASE}/token`, {
        method: "POST",
        headers: {
          "Content-Type": "application/x-www-form-urlencoded",
          ...basic(client_id, client_secret ?? ""),
        },
        body: new URLSearchParams({ grant_type: "client_credentials" }),
      }),
    );
    assert.equal(response.status, 200);
    const { access_token } = await response.json();
    assert.equal(decodeJwt(access_token).sub, "client:robot");
    assert.deepEqual(await introspected(t, access_token), { active: false });
  } finally {
    t.close();
  }
});
