/**
 * The GitLab client's authorization code grant (the redirect sign-in) against the simulated
 * GitLab over loopback: the authorization URL, PKCE S256, single-use codes, the redirect URI
 * check, and a confidential application's secret (sent only here, never in an error or a log).
 */

import assert from "node:assert/strict";
import { sha256Base64Url } from "../src/crypto.ts";
import { createGitLabUpstream } from "../src/upstream/gitlab.ts";
import { type Upstream, UpstreamError } from "../src/upstream/types.ts";
import { decideAtGitLab, withGitLab } from "./_service.ts";

const CLIENT_ID = "code-client";
const SECRET = "gitlab-application-secret-value";
const CALLBACK = "http://127.0.0.1:9/oauth/callback";
const VERIFIER = "a-verifier-of-enough-length-for-pkce-0123456789";

function client(gitlabUrl: URL, clientSecret?: string, logs: string[] = []): Upstream {
  return createGitLabUpstream({
    gitlabUrl,
    clientId: CLIENT_ID,
    clientSecret,
    scopes: "api read_user",
    timeoutMs: 2000,
    logger: { warn: (message, fields) => logs.push(`${message} ${JSON.stringify(fields)}`) },
  });
}

/** Answers at the simulated GitLab's page for `url`; returns what it sends back. */
async function approve(url: URL, decision: "approve" | "deny" = "approve") {
  const back = new URL(await decideAtGitLab(url, decision));
  assert.equal(`${back.origin}${back.pathname}`, CALLBACK);
  return back.searchParams;
}

/** The simulated GitLab as this confidential application's GitLab. */
const CONFIDENTIAL_APP = { clientId: CLIENT_ID, clientSecret: SECRET };

function authorizationUrl(upstream: Upstream, state = "st"): URL {
  return upstream.authorizationUrl({
    redirectUri: CALLBACK,
    state,
    codeChallenge: sha256Base64Url(VERIFIER),
  });
}

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<UpstreamError> {
  const error = await promise.then(() => assert.fail("expected a rejection"), (e: unknown) => e);
  assert.ok(error instanceof UpstreamError, String(error));
  assert.equal(error.code, code);
  assert.equal(error.failure, "terminal");
  return error;
}

Deno.test("authorizationUrl: GitLab's /oauth/authorize under a sub-path, with every parameter", () => {
  const url = authorizationUrl(client(new URL("https://gitlab.example/gitlab")), "s-1");
  assert.equal(`${url.origin}${url.pathname}`, "https://gitlab.example/gitlab/oauth/authorize");
  assert.deepEqual(Object.fromEntries(url.searchParams), {
    client_id: CLIENT_ID,
    redirect_uri: CALLBACK,
    response_type: "code",
    scope: "api read_user",
    state: "s-1",
    code_challenge: sha256Base64Url(VERIFIER),
    code_challenge_method: "S256",
  });
});

Deno.test("authorization code grant: approve → code → tokens → user; the code is single use", async () => {
  await withGitLab(async (gitlab) => {
    const upstream = client(gitlab.url, SECRET);
    const back = await approve(authorizationUrl(upstream));
    assert.equal(back.get("state"), "st");
    const code = back.get("code") ?? "";
    const grant = { code, codeVerifier: VERIFIER, redirectUri: CALLBACK };
    const tokens = await upstream.exchangeAuthorizationCode(grant);
    assert.ok(tokens.accessToken);
    assert.ok(tokens.refreshToken);
    assert.equal((await upstream.fetchUser(tokens.accessToken)).username, "ada");
    await rejectsWith(upstream.exchangeAuthorizationCode(grant), "invalid_grant");
    assert.equal(gitlab.calls.authorizationCode, 2);
  }, CONFIDENTIAL_APP);
});

Deno.test("authorization code grant: a wrong verifier or redirect URI is invalid_grant", async () => {
  await withGitLab(async (gitlab) => {
    const upstream = client(gitlab.url, SECRET);
    for (const wrong of [{ codeVerifier: `${VERIFIER}x` }, { redirectUri: `${CALLBACK}x` }]) {
      const code = (await approve(authorizationUrl(upstream))).get("code") ?? "";
      const grant = { code, codeVerifier: VERIFIER, redirectUri: CALLBACK, ...wrong };
      await rejectsWith(upstream.exchangeAuthorizationCode(grant), "invalid_grant");
    }
  }, CONFIDENTIAL_APP);
});

Deno.test("authorization code grant: a confidential application's secret is sent, and never shown", async () => {
  await withGitLab(async (gitlab) => {
    const logs: string[] = [];
    for (const secret of [undefined, "wrong-secret"]) {
      const upstream = client(gitlab.url, secret, logs);
      const code = (await approve(authorizationUrl(upstream))).get("code") ?? "";
      const error = await rejectsWith(
        upstream.exchangeAuthorizationCode({ code, codeVerifier: VERIFIER, redirectUri: CALLBACK }),
        "invalid_client",
      );
      assert.ok(!`${error.message}${error.stack}`.includes("wrong-secret"));
    }
    gitlab.failNext("token", "500");
    const upstream = client(gitlab.url, SECRET, logs);
    const code = (await approve(authorizationUrl(upstream))).get("code") ?? "";
    const grant = { code, codeVerifier: VERIFIER, redirectUri: CALLBACK };
    const failed = await upstream.exchangeAuthorizationCode(grant).catch((e: unknown) => e);
    assert.ok(failed instanceof UpstreamError && failed.failure === "transient");
    assert.ok(logs.length > 0);
    assert.ok(!logs.join("\n").includes(SECRET), logs.join("\n"));
  }, CONFIDENTIAL_APP);
});

Deno.test("authorization code grant: GitLab's Deny answers access_denied with the state", async () => {
  await withGitLab(async (gitlab) => {
    const back = await approve(authorizationUrl(client(gitlab.url, SECRET), "st-d"), "deny");
    assert.equal(back.get("error"), "access_denied");
    assert.equal(back.get("state"), "st-d");
    assert.equal(back.get("code"), null);
  }, CONFIDENTIAL_APP);
});

Deno.test("a server's own scopes: the authorization URL and the device flow's start ask GitLab for them instead", async () => {
  const url = client(new URL("https://gitlab.example")).authorizationUrl({
    redirectUri: CALLBACK,
    state: "s-2",
    codeChallenge: sha256Base64Url(VERIFIER),
    scopes: "read_user",
  });
  assert.equal(url.searchParams.get("scope"), "read_user");

  const asked: (string | null)[] = [];
  const gitlab = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    asked.push((await request.formData()).get("scope") as string | null);
    return Response.json({
      device_code: "dc",
      user_code: "ABCD-1234",
      verification_uri: new URL("/oauth/device", request.url).href,
      expires_in: 300,
      interval: 5,
    });
  });
  try {
    const upstream = client(new URL(`http://127.0.0.1:${gitlab.addr.port}`));
    await upstream.startDeviceAuthorization("read_user");
    await upstream.startDeviceAuthorization();
    assert.deepEqual(asked, ["read_user", "api read_user"]);
  } finally {
    await gitlab.shutdown();
  }
});
