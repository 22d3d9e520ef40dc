/**
 * A strict, spec-exact OAuth client nobody here wrote (`oauth4webapi`) against the real
 * service (`main.ts` as a child process) and the simulated GitLab: RFC 8414 discovery with its
 * issuer check, PKCE authorization with the RFC 9207 `iss` check, code exchange, refresh and
 * RFC 7009 revocation. The service runs with REDIRECT_URI_POLICY=registered, the strictest setup.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { launchBrowser } from "./_browser.ts";
import { flowDataFromPage, TEST_SECRET } from "./_helpers.ts";
import { type ServiceProcess, spawnService } from "./_service.ts";

/** oauth4webapi refuses http:// unless told; everything here is on loopback. */
const INSECURE = { [oauth.allowInsecureRequests]: true } as const;

interface Rig {
  gitlab: ReturnType<typeof startSimulatedGitLab>;
  service: ServiceProcess;
  issuer: URL;
  close(): Promise<void>;
}

async function rig(): Promise<Rig> {
  const gitlab = startSimulatedGitLab();
  const service = await spawnService({
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "oauth4webapi-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
    REDIRECT_URI_POLICY: "registered",
  });
  return {
    gitlab,
    service,
    issuer: new URL(service.url),
    async close() {
      await service.stop();
      await gitlab.close();
    },
  };
}

async function discover(r: Rig): Promise<oauth.AuthorizationServer> {
  const response = await oauth.discoveryRequest(r.issuer, { algorithm: "oauth2", ...INSECURE });
  const as = await oauth.processDiscoveryResponse(r.issuer, response);
  // oauth4webapi compares normalised URLs; the service promises the exact bytes.
  assert.equal(as.issuer, r.service.url);
  return as;
}

/** oauth4webapi has no registration API; a plain RFC 7591 request to the advertised endpoint. */
async function register(as: oauth.AuthorizationServer, redirectUri: string): Promise<oauth.Client> {
  assert.ok(as.registration_endpoint);
  const response = await fetch(as.registration_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      redirect_uris: [redirectUri],
      client_name: "oauth4webapi test client",
      token_endpoint_auth_method: "none",
    }),
  });
  assert.equal(response.status, 201);
  const body = await response.json();
  return { client_id: body.client_id, token_endpoint_auth_method: "none" };
}

async function authorizationUrl(
  as: oauth.AuthorizationServer,
  client: oauth.Client,
  redirectUri: string,
  verifier: string,
  state: string,
): Promise<URL> {
  const url = new URL(as.authorization_endpoint!);
  url.searchParams.set("response_type", "code");
  url.searchParams.set("client_id", client.client_id);
  url.searchParams.set("redirect_uri", redirectUri);
  url.searchParams.set("scope", "mcp:tools mcp:resources");
  url.searchParams.set("code_challenge", await oauth.calculatePKCECodeChallenge(verifier));
  url.searchParams.set("code_challenge_method", "S256");
  url.searchParams.set("state", state);
  return url;
}

/**
 * The page flow without a browser: load the page, approve at GitLab, poll until complete and
 * build the callback URL exactly as the page's script does (code, state, then iss).
 */
async function authorizeWithoutBrowser(r: Rig, url: URL): Promise<URL> {
  const page = await fetch(url);
  assert.equal(page.status, 200);
  const data = flowDataFromPage(await page.text());
  r.gitlab.approve(r.gitlab.lastUserCode()!);
  const poll = await fetch(`${data.pollUrl}?flow_state=${encodeURIComponent(data.flowState)}`);
  const body = await poll.json();
  assert.equal(body.status, "complete", JSON.stringify(body));
  // Spec §2.4 exactly: the issuer is the page's business, not the poll body's.
  assert.deepEqual(Object.keys(body).sort(), ["code", "redirect_uri", "state", "status"]);
  const callback = new URL(body.redirect_uri);
  callback.searchParams.set("code", body.code);
  if (typeof body.state === "string") callback.searchParams.set("state", body.state);
  if (typeof data.issuer === "string") callback.searchParams.set("iss", data.issuer);
  return callback;
}

Deno.test("oauth4webapi: discovery with issuer check, PKCE authorization with iss, code exchange, refresh, revocation", async () => {
  const r = await rig();
  try {
    const as = await discover(r);
    assert.equal(as.authorization_response_iss_parameter_supported, true);
    const redirectUri = "http://127.0.0.1:9/callback";
    const client = await register(as, redirectUri);
    const verifier = oauth.generateRandomCodeVerifier();
    const state = oauth.generateRandomState();

    const callback = await authorizeWithoutBrowser(
      r,
      await authorizationUrl(as, client, redirectUri, verifier, state),
    );
    const params = oauth.validateAuthResponse(as, client, callback, state);

    // The metadata promises iss; a response without it, or with another, is refused.
    const withoutIss = new URL(callback);
    withoutIss.searchParams.delete("iss");
    assert.throws(() => oauth.validateAuthResponse(as, client, withoutIss, state), /iss/);
    const otherIss = new URL(callback);
    otherIss.searchParams.set("iss", `${r.service.url}/`);
    assert.throws(() => oauth.validateAuthResponse(as, client, otherIss, state), /iss/);

    const codeResponse = await oauth.authorizationCodeGrantRequest(
      as,
      client,
      oauth.None(),
      params,
      redirectUri,
      verifier,
      INSECURE,
    );
    const tokens = await oauth.processAuthorizationCodeResponse(as, client, codeResponse);
    assert.equal(tokens.token_type, "bearer");
    assert.equal(tokens.scope, "mcp:tools mcp:resources");
    assert.equal(tokens.expires_in, 3600);
    assert.ok(tokens.refresh_token);
    const claims = JSON.parse(
      new TextDecoder().decode(Uint8Array.fromBase64(tokens.access_token.split(".")[1], {
        alphabet: "base64url",
      })),
    );
    assert.equal(claims.iss, as.issuer);
    assert.equal(claims.aud, client.client_id);

    const refreshResponse = await oauth.refreshTokenGrantRequest(
      as,
      client,
      oauth.None(),
      tokens.refresh_token,
      INSECURE,
    );
    const refreshed = await oauth.processRefreshTokenResponse(as, client, refreshResponse);
    assert.ok(refreshed.refresh_token);
    assert.notEqual(refreshed.refresh_token, tokens.refresh_token);

    assert.equal(r.gitlab.revokedTokens.size, 0);
    const revocation = await oauth.revocationRequest(
      as,
      client,
      oauth.None(),
      refreshed.refresh_token!,
      { ...INSECURE, additionalParameters: { token_type_hint: "refresh_token" } },
    );
    await oauth.processRevocationResponse(revocation);
    assert.equal(r.gitlab.revokedTokens.size, 1, "the GitLab token is revoked upstream");

    const afterRevocation = await oauth.refreshTokenGrantRequest(
      as,
      client,
      oauth.None(),
      refreshed.refresh_token!,
      INSECURE,
    );
    await assert.rejects(
      oauth.processRefreshTokenResponse(as, client, afterRevocation),
      (error) =>
        error instanceof oauth.ResponseBodyError && error.error === "invalid_grant" &&
        error.status === 400,
    );
  } finally {
    await r.close();
  }
});

Deno.test("oauth4webapi: the code is bound to its client — another registered client's exchange is refused", async () => {
  const r = await rig();
  try {
    const as = await discover(r);
    const redirectUri = "http://127.0.0.1:9/callback";
    const client = await register(as, redirectUri);
    const other = await register(as, redirectUri);
    const verifier = oauth.generateRandomCodeVerifier();
    const state = oauth.generateRandomState();
    const callback = await authorizeWithoutBrowser(
      r,
      await authorizationUrl(as, client, redirectUri, verifier, state),
    );
    const params = oauth.validateAuthResponse(as, client, callback, state);
    const response = await oauth.authorizationCodeGrantRequest(
      as,
      other,
      oauth.None(),
      params,
      redirectUri,
      verifier,
      INSECURE,
    );
    await assert.rejects(
      oauth.processAuthorizationCodeResponse(as, other, response),
      (error) => error instanceof oauth.ResponseBodyError && error.error === "invalid_grant",
    );
  } finally {
    await r.close();
  }
});

Deno.test({
  name:
    "oauth4webapi + Chromium: the device page's redirect (code, state, iss) passes validateAuthResponse",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const browser = await launchBrowser();
    if ("skip" in browser) {
      // deno-lint-ignore no-console -- the reason a test did not run must be visible.
      console.log(`skipping ${t.name}: ${browser.skip}`);
      return;
    }
    const r = await rig();
    const clientServer = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      () =>
        new Response("<!doctype html><title>client</title>", {
          headers: { "Content-Type": "text/html" },
        }),
    );
    try {
      const as = await discover(r);
      const redirectUri = `http://127.0.0.1:${clientServer.addr.port}/callback`;
      const client = await register(as, redirectUri);
      const verifier = oauth.generateRandomCodeVerifier();
      const state = oauth.generateRandomState();
      const page = await browser.newPage();
      await page.goto((await authorizationUrl(as, client, redirectUri, verifier, state)).href);
      r.gitlab.approve(r.gitlab.lastUserCode()!);
      // The page polls 5 s after load, then waits 1 s before redirecting.
      await page.waitForURL((url) => url.href.startsWith(redirectUri), { timeout: 20_000 });
      const landed = new URL(page.url());
      assert.equal(landed.searchParams.get("iss"), r.service.url);
      const params = oauth.validateAuthResponse(as, client, landed, state);

      const response = await oauth.authorizationCodeGrantRequest(
        as,
        client,
        oauth.None(),
        params,
        redirectUri,
        verifier,
        INSECURE,
      );
      const tokens = await oauth.processAuthorizationCodeResponse(as, client, response);
      assert.equal(tokens.token_type, "bearer");
    } finally {
      await browser.close();
      await clientServer.shutdown();
      await r.close();
    }
  },
});
