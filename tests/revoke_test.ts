/**
 * `POST /revoke` (RFC 7009): a refresh or access token ends the session it belongs to, the
 * session's GitLab token is revoked upstream (best effort), and unknown tokens answer 200.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { createTokenSigner } from "../src/jwt.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  assertError,
  issueTokens,
  makeTestApp,
  refresh,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
  token,
  withApp,
  withEnv,
} from "./_helpers.ts";
import { addClient, basic, writeAccessFile } from "./_machine_clients.ts";
import { postToken, type ServiceProcess, signInOverHttp, spawnWithGitLab } from "./_service.ts";

function revoke(
  t: TestApp,
  form: Record<string, string>,
  contentType = "application/x-www-form-urlencoded",
): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/revoke`, {
      method: "POST",
      headers: { "Content-Type": contentType },
      body: new URLSearchParams(form),
    }),
  );
}

async function assertRevoked200(response: Response): Promise<void> {
  assert.equal(response.status, 200, await response.clone().text());
  assert.equal(response.headers.get("cache-control"), "no-store");
  assert.equal(await response.text(), "");
}

async function assertRefreshFails(t: TestApp, refreshToken: string): Promise<void> {
  const response = await refresh(t, refreshToken);
  assert.equal(response.status, 400);
  assert.equal((await response.json()).error, "invalid_grant");
}

function sessionIdOf(accessToken: string): string {
  const sid = decodeJwt(accessToken).sid;
  assert.equal(typeof sid, "string");
  return sid as string;
}

Deno.test("revoke: a refresh token ends its session — refresh fails, the access token's session is gone", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    const sid = sessionIdOf(tokens.access_token);
    assert.ok(await t.store.getSession(sid));
    await assertRevoked200(
      await revoke(t, { token: tokens.refresh_token, token_type_hint: "refresh_token" }),
    );
    assert.equal(await t.store.getSession(sid), null);
    await assertRefreshFails(t, tokens.refresh_token);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
  }));

Deno.test("revoke: a refresh token without a hint, or with the wrong hint, is found all the same", () =>
  withApp(async (t) => {
    for (const hint of [undefined, "access_token", "something_else"]) {
      const tokens = await issueTokens(t);
      const form: Record<string, string> = { token: tokens.refresh_token };
      if (hint) form.token_type_hint = hint;
      await assertRevoked200(await revoke(t, form));
      await assertRefreshFails(t, tokens.refresh_token);
      assert.equal(await t.store.getSession(sessionIdOf(tokens.access_token)), null, hint);
    }
  }));

Deno.test("revoke: an access token ends the session named by its sid", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    const sid = sessionIdOf(tokens.access_token);
    await assertRevoked200(
      await revoke(t, { token: tokens.access_token, token_type_hint: "access_token" }),
    );
    assert.equal(await t.store.getSession(sid), null);
    await assertRefreshFails(t, tokens.refresh_token);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
  }));

Deno.test("revoke: an access token hinted as refresh_token is still found", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    await assertRevoked200(
      await revoke(t, { token: tokens.access_token, token_type_hint: "refresh_token" }),
    );
    await assertRefreshFails(t, tokens.refresh_token);
  }));

Deno.test("revoke: a leaked access token past its exp answers 200 and logs nobody out", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    t.clock.advance(2 * 3600 * 1000);
    await assertRevoked200(await revoke(t, { token: tokens.access_token }));
    assert.ok(await t.store.getSession(sessionIdOf(tokens.access_token)), "the session lives");
    assert.equal(t.upstream.calls.revoke, 0, "the GitLab token is not revoked");
    const refreshed = await refresh(t, tokens.refresh_token);
    assert.equal(refreshed.status, 200, "the refresh token still works");
    await refreshed.body?.cancel();
  }));

Deno.test("revoke: an access token in its last second still ends its session", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    t.clock.advance(3600 * 1000 - 1);
    await assertRevoked200(await revoke(t, { token: tokens.access_token }));
    assert.equal(await t.store.getSession(sessionIdOf(tokens.access_token)), null);
  }));

Deno.test("revoke: an access token signed with JWT_SECRET_PREVIOUS (still accepted) ends its session", async () => {
  const previous = "the-secret-before-the-rotation-32-bytes!";
  const t = await makeTestApp({ env: { JWT_SECRET_PREVIOUS: previous } });
  try {
    const tokens = await issueTokens(t);
    const sid = sessionIdOf(tokens.access_token);
    // The same session's access token as minted before the rotation.
    const oldSigner = createTokenSigner([previous]);
    const claims = decodeJwt(tokens.access_token);
    const oldToken = await oldSigner.sign(
      {
        iss: String(claims.iss),
        sub: String(claims.sub),
        aud: String(claims.aud),
        sid,
        scope: String(claims.scope),
        gitlab_user: String(claims.gitlab_user),
      },
      t.clock.now(),
      3600,
    );
    assert.equal(await (createTokenSigner([TEST_SECRET])).readSigned(oldToken), null);
    await assertRevoked200(await revoke(t, { token: oldToken }));
    assert.equal(await t.store.getSession(sid), null);
    await assertRefreshFails(t, tokens.refresh_token);
  } finally {
    t.close();
  }
});

Deno.test("revoke: only the named session ends; another session keeps refreshing", () =>
  withApp(async (t) => {
    const first = await issueTokens(t);
    const second = await issueTokens(t);
    await assertRevoked200(await revoke(t, { token: first.refresh_token }));
    await assertRefreshFails(t, first.refresh_token);
    const response = await refresh(t, second.refresh_token);
    assert.equal(response.status, 200);
    await response.body?.cancel();
  }));

Deno.test("revoke: unknown, garbage and foreign-signed tokens → 200, nothing revoked upstream", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    const [header, payload] = tokens.access_token.split(".");
    for (
      const value of [
        "not-a-token-we-issued",
        "a.b.c",
        `${header}.${payload}.${"A".repeat(43)}`, // our claims, forged signature
      ]
    ) {
      await assertRevoked200(await revoke(t, { token: value }));
    }
    assert.equal(t.upstream.calls.revoke, 0);
    assert.ok(await t.store.getSession(sessionIdOf(tokens.access_token)));
  }));

Deno.test("revoke: revoking twice answers 200 both times and revokes upstream once", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    await assertRevoked200(await revoke(t, { token: tokens.refresh_token }));
    await assertRevoked200(await revoke(t, { token: tokens.refresh_token }));
    await assertRevoked200(await revoke(t, { token: tokens.access_token }));
    assert.equal(t.upstream.calls.revoke, 1);
  }));

Deno.test("revoke: a rotated-out refresh token no longer names the session", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    const refreshed = await refresh(t, tokens.refresh_token);
    const current = await refreshed.json();
    await assertRevoked200(await revoke(t, { token: tokens.refresh_token }));
    assert.ok(await t.store.getSession(sessionIdOf(tokens.access_token)));
    const again = await refresh(t, current.refresh_token);
    assert.equal(again.status, 200);
    await again.body?.cancel();
  }));

Deno.test("revoke: with REFRESH_GRACE_SECONDS, revoking the rotated-away token inside its window ends the session", () =>
  withEnv({ REFRESH_GRACE_SECONDS: "30" }, async (t) => {
    // A client that lost the refresh answer logs out with the token it still holds.
    const { refresh_token: previous } = await issueTokens(t);
    const rotated = await refresh(t, previous);
    assert.equal(rotated.status, 200);
    const { refresh_token: current } = await rotated.json();
    assert.equal((await revoke(t, { token: previous })).status, 200);
    for (const token of [previous, current]) {
      const refused = await refresh(t, token);
      assert.equal(refused.status, 400, "a revoked token is worth nothing (RFC 7009 §2.2)");
      await refused.body?.cancel();
    }
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
  }));

Deno.test("revoke: missing token → 400 invalid_request", () =>
  withApp(async (t) => {
    const forms: Record<string, string>[] = [{}, { token: "" }, {
      token_type_hint: "refresh_token",
    }];
    for (const form of forms) {
      const response = await revoke(t, form);
      assert.equal(response.status, 400);
      const body = await response.json();
      assert.equal(body.error, "invalid_request");
      assert.equal(typeof body.error_description, "string");
    }
  }));

Deno.test("revoke: a body that is not form-encoded or JSON → 400 invalid_request", () =>
  withApp(async (t) => {
    const response = await revoke(t, { token: "x" }, "text/plain");
    assert.equal(response.status, 400);
    assert.equal((await response.json()).error, "invalid_request");
  }));

Deno.test("revoke: a failing upstream revocation still answers 200 and the session is ended", () =>
  withApp(async (t) => {
    const tokens = await issueTokens(t);
    t.upstream.revokeToken = () =>
      Promise.reject(new UpstreamError("transient", "http_502", "GitLab is down"));
    await assertRevoked200(await revoke(t, { token: tokens.refresh_token }));
    await assertRefreshFails(t, tokens.refresh_token);
    assert.equal(await t.store.getSession(sessionIdOf(tokens.access_token)), null);
  }));

Deno.test("revoke: without OAuth configuration → 500 'OAuth not configured'", async () => {
  const t = await makeTestApp({ configured: false });
  try {
    const response = await revoke(t, { token: "x" });
    assert.equal(response.status, 500);
    assert.equal((await response.json()).error_description, "OAuth not configured");
  } finally {
    t.close();
  }
});

// Over HTTP: the real GitLab client against the simulated GitLab.

const REDIRECT = "http://127.0.0.1:9/callback";

function revokeOverHttp(service: ServiceProcess, value: string): Promise<Response> {
  return fetch(`${service.url}/revoke`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token: value }),
  });
}

async function assertRefreshFailsOverHttp(service: ServiceProcess, refreshToken: string) {
  const response = await postToken(service.url, {
    grant_type: "refresh_token",
    refresh_token: refreshToken,
  });
  assert.equal(response.status, 400);
  assert.equal(response.body.error, "invalid_grant");
}

Deno.test("revoke over HTTP: the session's GitLab token is revoked at GitLab", async () => {
  const { gitlab, service, close } = await spawnWithGitLab("revoke-app");
  try {
    const tokens = await signInOverHttp(service.url, gitlab, { redirectUri: REDIRECT });
    assert.equal(gitlab.revokedTokens.size, 0);
    const response = await revokeOverHttp(service, tokens.refresh_token);
    assert.equal(response.status, 200);
    await response.body?.cancel();
    assert.equal(gitlab.calls.revoke, 1);
    assert.equal(gitlab.revokedTokens.size, 1);
    await assertRefreshFailsOverHttp(service, tokens.refresh_token);
  } finally {
    await close();
  }
});

Deno.test("revoke over HTTP: GitLab unreachable → still 200, the session is ended", async () => {
  const { gitlab, service, close } = await spawnWithGitLab("revoke-app", {
    UPSTREAM_TIMEOUT_MS: "2000",
  });
  try {
    const tokens = await signInOverHttp(service.url, gitlab, { redirectUri: REDIRECT });
    await gitlab.close();
    const response = await revokeOverHttp(service, tokens.access_token);
    assert.equal(response.status, 200);
    await response.body?.cancel();
    // The session is gone: the refresh token is refused (no GitLab call is needed to know).
    await assertRefreshFailsOverHttp(service, tokens.refresh_token);
    assert.ok(
      service.logs.some((line) => line.includes("GitLab token revocation failed")),
      "the failure is logged",
    );
  } finally {
    await close();
  }
});

Deno.test("revoke: a live machine client's access token → 400 unsupported_token_type, not a 200 that revokes nothing (RFC 7009 §2.2.1)", async () => {
  const path = await writeAccessFile([{ client_id: "vault", servers: ["default"] }]);
  const t = await makeTestApp({ env: { MACHINE_ACCESS_FILE: path } });
  try {
    const { client_id, client_secret } = await addClient(t.store, { id: "vault", secret: true });
    const issued = await token(t, { grant_type: "client_credentials" }, {
      headers: basic(client_id, client_secret ?? ""),
    });
    const { access_token } = await issued.json();
    const hints: Record<string, string>[] = [{}, { token_type_hint: "access_token" }];
    for (const hint of hints) {
      const body = await assertError(
        await revoke(t, { token: access_token, ...hint }),
        400,
        "unsupported_token_type",
        /machine caller's access token cannot be revoked/,
      );
      assert.ok(!JSON.stringify(body).includes(access_token));
    }
    // Past its exp it is no token at all: 200 as for any other.
    t.clock.advance((t.config.accessTokenTtlSeconds + 1) * 1000);
    await assertRevoked200(await revoke(t, { token: access_token }));
  } finally {
    t.close();
  }
});
