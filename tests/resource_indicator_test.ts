/**
 * RFC 8707 resource indicators: `resource` at `/authorize` and `/token` must name the protected
 * MCP server (400 `invalid_target` otherwise), the session remembers it, access tokens carry it,
 * and the gateway and the library guard refuse a token bound to another resource. The spec's
 * claims and answers stay as they are.
 */

import { testGuard } from "./_guard.ts";
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { createTokenSigner } from "../src/jwt.ts";
import { sameResource } from "../src/http/resource.ts";
import {
  assertError,
  authorize,
  exchange,
  issueCode,
  issueTokens,
  refresh,
  TEST_BASE,
  TEST_SECRET,
  withApp,
  withEnv,
} from "./_helpers.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";

const RESOURCE = `${TEST_BASE}/mcp`;
const OTHER = "https://other.example/mcp";

async function tokenBody(response: Response): Promise<Record<string, string>> {
  const text = await response.text();
  assert.equal(response.status, 200, text);
  return JSON.parse(text);
}

Deno.test("resource: the same URL in any spelling of scheme, host and trailing slash; nothing else", () => {
  assert.ok(sameResource("http://auth.test/mcp", "HTTP://AUTH.test/mcp/"));
  assert.ok(sameResource("https://a.example:443/mcp", "https://a.example/mcp"));
  assert.ok(!sameResource("http://auth.test/MCP", "http://auth.test/mcp"), "paths are exact");
  assert.ok(!sameResource("http://auth.test/mcp#x", "http://auth.test/mcp"));
  assert.ok(!sameResource("http://auth.test/mcp?x=1", "http://auth.test/mcp"));
  assert.ok(!sameResource("http://auth.test:8080/mcp", "http://auth.test/mcp"));
  assert.ok(!sameResource("/mcp", "/mcp"), "relative URIs name nothing");
});

Deno.test("resource: /authorize accepts the protected MCP server, absent or spelled differently", () =>
  withApp(async (t) => {
    for (const resource of [null, RESOURCE, `${RESOURCE}/`, "HTTP://Auth.Test/mcp"]) {
      const response = await authorize(t, { resource });
      assert.equal(response.status, 200, `${resource}: ${await response.text()}`);
    }
  }));

Deno.test("resource: /authorize answers 400 invalid_target for another resource, a fragment or garbage", () =>
  withApp(async (t) => {
    // `resource=` without a value is as if omitted (servers_audience_test.ts).
    for (const resource of [OTHER, `${RESOURCE}#frag`, "not a url", `${TEST_BASE}/mcp2`]) {
      await assertError(await authorize(t, { resource }), 400, "invalid_target");
    }
    // The spec's own checks still come first.
    await assertError(
      await authorize(t, { resource: OTHER, code_challenge_method: "plain" }),
      400,
      "invalid_request",
    );
    assert.equal(t.upstream.calls.start, 0, "no device flow started");
  }));

Deno.test("resource: tokens carry the session's resource in a resource claim; aud stays the client id", () =>
  withApp(async (t) => {
    const code = await issueCode(t, { resource: `${RESOURCE}/` });
    const body = await tokenBody(await exchange(t, code, { resource: RESOURCE }));
    const claims = decodeJwt(body.access_token);
    assert.equal(claims.resource, RESOURCE);
    assert.equal(claims.aud, "client-1");
    const session = await t.store.getSession(String(claims.sid));
    assert.equal(session?.value.resource, RESOURCE);

    const refreshed = await tokenBody(await refresh(t, body.refresh_token, { resource: RESOURCE }));
    assert.equal(decodeJwt(refreshed.access_token).resource, RESOURCE);
  }));

Deno.test("resource: /token answers 400 invalid_target for another resource, in both grants", () =>
  withApp(async (t) => {
    const code = await issueCode(t);
    await assertError(await exchange(t, code, { resource: OTHER }), 400, "invalid_target");
    // The refused exchange did not spend the code.
    const body = await tokenBody(await exchange(t, code));
    await assertError(
      await refresh(t, body.refresh_token, { resource: OTHER }),
      400,
      "invalid_target",
    );
    await tokenBody(await refresh(t, body.refresh_token));
  }));

Deno.test("resource: a refresh naming another resource than the session's → 400 invalid_target", () =>
  withApp(async (t) => {
    const body = await issueTokens(t);
    const sid = String(decodeJwt(body.access_token).sid);
    const session = await t.store.getSession(sid);
    assert.ok(session);
    // A session authorized for the server under an earlier base URL.
    const earlier = "http://old.example/mcp";
    assert.ok(await t.store.saveSession(session, { ...session.value, resource: earlier }));
    await assertError(
      await refresh(t, body.refresh_token, { resource: RESOURCE }),
      400,
      "invalid_target",
    );
    const again = await tokenBody(await refresh(t, body.refresh_token));
    assert.equal(decodeJwt(again.access_token).resource, earlier);
  }));

Deno.test("resource: a session stored before resource indicators still refreshes, for the protected server", () =>
  withApp(async (t) => {
    const body = await issueTokens(t);
    const session = await t.store.getSession(String(decodeJwt(body.access_token).sid));
    assert.ok(session);
    const { resource: _dropped, ...old } = session.value;
    assert.ok(await t.store.saveSession(session, old));
    assert.equal((await t.store.getSession(old.id))?.value.resource, undefined);

    const refreshed = await tokenBody(await refresh(t, body.refresh_token, { resource: RESOURCE }));
    assert.equal(decodeJwt(refreshed.access_token).resource, RESOURCE);
  }));

Deno.test("resource: ACCESS_TOKEN_AUDIENCE=resource makes aud the MCP server's URL", () =>
  withEnv({ ACCESS_TOKEN_AUDIENCE: "resource" }, async (t) => {
    const claims = decodeJwt((await issueTokens(t)).access_token);
    assert.equal(claims.aud, RESOURCE);
    assert.equal(claims.resource, RESOURCE);
  }));

/** A token our secret signed for the same session, but bound to another MCP server. */
async function tokenForOtherResource(accessToken: string, nowMs: number): Promise<string> {
  const claims = decodeJwt(accessToken);
  return await createTokenSigner([TEST_SECRET]).sign(
    {
      iss: String(claims.iss),
      sub: String(claims.sub),
      aud: String(claims.aud),
      sid: String(claims.sid),
      scope: String(claims.scope),
      gitlab_user: String(claims.gitlab_user),
      resource: OTHER,
    },
    nowMs,
    3600,
  );
}

Deno.test("resource: the gateway refuses a token bound to another resource with 401 invalid_token", async () => {
  const mcp = startMcpUpstream();
  try {
    await withEnv({ MCP_UPSTREAM_URL: mcp.url }, async (t) => {
      const { access_token } = await issueTokens(t);
      const foreign = await tokenForOtherResource(access_token, t.clock.now());
      const response = await t.app(
        new Request(RESOURCE, {
          method: "POST",
          headers: { Authorization: `Bearer ${foreign}`, "Content-Type": "application/json" },
          body: "{}",
        }),
      );
      await assertError(response, 401, "invalid_token", /another resource/);
      assert.match(response.headers.get("www-authenticate") ?? "", /error="invalid_token"/);
      assert.equal(mcp.requests.length, 0, "nothing reached the MCP server");
    });
  } finally {
    await mcp.close();
  }
});

Deno.test("resource: createResourceGuard refuses a token bound to another resource, accepts its own", () =>
  withApp(async (t) => {
    const { access_token } = await issueTokens(t);
    const guard = testGuard(t);
    const request = (token: string) =>
      new Request(RESOURCE, { method: "POST", headers: { Authorization: `Bearer ${token}` } });
    const own = await guard.authenticate(request(access_token));
    assert.ok(!(own instanceof Response), "its own token is accepted");
    const refused = await guard.authenticate(
      request(await tokenForOtherResource(access_token, t.clock.now())),
    );
    assert.ok(refused instanceof Response);
    await assertError(refused, 401, "invalid_token", /another resource/);

    const elsewhere = testGuard(t, { resource: OTHER });
    const mismatch = await elsewhere.authenticate(request(access_token));
    assert.ok(mismatch instanceof Response, "a token for this service's MCP server, elsewhere");
    await assertError(mismatch, 401, "invalid_token");
  }));
