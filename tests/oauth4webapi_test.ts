/**
 * A strict, spec-exact OAuth client nobody here wrote (`oauth4webapi`) against the real
 * service (`main.ts` as a child process) and the simulated GitLab: RFC 8414 discovery with its
 * issuer check, PKCE authorization with the RFC 9207 `iss` check, code exchange, refresh and
 * RFC 7009 revocation. The service runs with REDIRECT_URI_POLICY=registered, the strictest setup.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { ignoreBrowserTests, launchBrowser, startCallbackServer } from "./_browser.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { postInitialize } from "./_mcp_client.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import {
  followPageWithoutBrowser,
  redirectSignInWithoutBrowser,
  type ServiceWithGitLab,
  spawnService,
  spawnWithGitLab,
} from "./_service.ts";

/** oauth4webapi refuses http:// unless told; everything here is on loopback. */
const INSECURE = { [oauth.allowInsecureRequests]: true } as const;

interface Rig extends ServiceWithGitLab {
  issuer: URL;
}

async function rig(env: Record<string, string> = {}): Promise<Rig> {
  const started = await spawnWithGitLab("oauth4webapi-app", {
    REDIRECT_URI_POLICY: "registered",
    ...env,
  });
  return { ...started, issuer: new URL(started.service.url) };
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
  resource?: string,
): Promise<URL> {
  const url = new URL(as.authorization_endpoint!);
  if (resource !== undefined) url.searchParams.set("resource", resource);
  url.searchParams.set("response_type", "code");
  url.searchParams.set("client_id", client.client_id);
  url.searchParams.set("redirect_uri", redirectUri);
  url.searchParams.set("scope", "mcp:tools mcp:resources");
  url.searchParams.set("code_challenge", await oauth.calculatePKCECodeChallenge(verifier));
  url.searchParams.set("code_challenge_method", "S256");
  url.searchParams.set("state", state);
  return url;
}

/** The authorization_code grant as a public client (no client authentication), over loopback. */
function codeGrantRequest(
  as: oauth.AuthorizationServer,
  client: oauth.Client,
  params: URLSearchParams,
  redirectUri: string,
  verifier: string,
  additionalParameters: Record<string, string> = {},
): Promise<Response> {
  return oauth.authorizationCodeGrantRequest(
    as,
    client,
    oauth.None(),
    params,
    redirectUri,
    verifier,
    { ...INSECURE, additionalParameters },
  );
}

/** The refresh_token grant as a public client, over loopback. */
function refreshGrantRequest(
  as: oauth.AuthorizationServer,
  client: oauth.Client,
  refreshToken: string,
  additionalParameters: Record<string, string> = {},
): Promise<Response> {
  return oauth.refreshTokenGrantRequest(as, client, oauth.None(), refreshToken, {
    ...INSECURE,
    additionalParameters,
  });
}

/**
 * The page flow without a browser: load the page, approve at GitLab, poll until complete and
 * build the callback URL exactly as the page's script does (code, state, then iss).
 */
async function authorizeWithoutBrowser(r: Rig, url: URL): Promise<URL> {
  const { callback, done } = await followPageWithoutBrowser(url, r.gitlab);
  // Spec §2.4 exactly: the issuer is the page's business, not the poll body's.
  assert.deepEqual(Object.keys(done).sort(), ["code", "redirect_uri", "state", "status"]);
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

    const codeResponse = await codeGrantRequest(as, client, params, redirectUri, verifier);
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

    const refreshResponse = await refreshGrantRequest(as, client, tokens.refresh_token);
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

    const afterRevocation = await refreshGrantRequest(as, client, refreshed.refresh_token!);
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
    const response = await codeGrantRequest(as, other, params, redirectUri, verifier);
    await assert.rejects(
      oauth.processAuthorizationCodeResponse(as, other, response),
      (error) => error instanceof oauth.ResponseBodyError && error.error === "invalid_grant",
    );
  } finally {
    await r.close();
  }
});

Deno.test("oauth4webapi: through the redirect sign-in (GITLAB_SIGN_IN=redirect): consent, GitLab, callback with iss, code exchange", async () => {
  const r = await rig({ GITLAB_SIGN_IN: "redirect" });
  try {
    const as = await discover(r);
    const redirectUri = "http://127.0.0.1:9/callback";
    const client = await register(as, redirectUri);
    const verifier = oauth.generateRandomCodeVerifier();
    const state = oauth.generateRandomState();
    const callback = await redirectSignInWithoutBrowser(
      await authorizationUrl(as, client, redirectUri, verifier, state),
    );
    const params = oauth.validateAuthResponse(as, client, callback, state);
    const response = await codeGrantRequest(as, client, params, redirectUri, verifier);
    const tokens = await oauth.processAuthorizationCodeResponse(as, client, response);
    assert.equal(tokens.token_type, "bearer");
    assert.equal(tokens.scope, "mcp:tools mcp:resources");
    assert.equal(r.gitlab.calls.authorizationCode, 1);
    assert.equal(r.gitlab.calls.authorizeDevice, 0);

    // GitLab's Deny, as the client sees it: an error response it recognises, iss checked.
    const deniedState = oauth.generateRandomState();
    const denied = await redirectSignInWithoutBrowser(
      await authorizationUrl(as, client, redirectUri, verifier, deniedState),
      undefined,
      "deny",
    );
    assert.throws(
      () => oauth.validateAuthResponse(as, client, denied, deniedState),
      (error) =>
        error instanceof oauth.AuthorizationResponseError && error.error === "access_denied",
    );
  } finally {
    await r.close();
  }
});

Deno.test("oauth4webapi: resource (RFC 8707) in the authorization and token requests; a token for another MCP server is refused by its gateway", async () => {
  const mcp = startMcpUpstream();
  const kvDir = await Deno.makeTempDir();
  const shared = { KV_PATH: `${kvDir}/kv.sqlite3`, MCP_UPSTREAM_URL: mcp.url };
  const r = await rig(shared);
  // Another MCP server's gateway: same secret, same KV, same issuer, another resource.
  const other = await spawnService({
    ...shared,
    GITLAB_URL: r.gitlab.url.href,
    GITLAB_CLIENT_ID: "oauth4webapi-app",
    JWT_SECRET: TEST_SECRET,
    BASE_URL: r.service.url,
    MCP_RESOURCE_URL: "http://other-mcp.example/mcp",
  });
  try {
    const as = await discover(r);
    const resource = `${r.service.url}/mcp`;
    const redirectUri = "http://127.0.0.1:9/callback";
    const client = await register(as, redirectUri);
    const verifier = oauth.generateRandomCodeVerifier();
    const state = oauth.generateRandomState();
    const callback = await authorizeWithoutBrowser(
      r,
      await authorizationUrl(as, client, redirectUri, verifier, state, resource),
    );
    const params = oauth.validateAuthResponse(as, client, callback, state);

    const elsewhere = await codeGrantRequest(as, client, params, redirectUri, verifier, {
      resource: "http://other-mcp.example/mcp",
    });
    await assert.rejects(
      oauth.processAuthorizationCodeResponse(as, client, elsewhere),
      (error) => error instanceof oauth.ResponseBodyError && error.error === "invalid_target",
    );
    const response = await codeGrantRequest(as, client, params, redirectUri, verifier, {
      resource,
    });
    const tokens = await oauth.processAuthorizationCodeResponse(as, client, response);
    const refreshed = await oauth.processRefreshTokenResponse(
      as,
      client,
      await refreshGrantRequest(as, client, tokens.refresh_token!, { resource }),
    );

    const call = (base: string) =>
      postInitialize(base, refreshed.access_token, "oauth4webapi-test");
    const refused = await call(other.url);
    assert.equal(refused.status, 401);
    assert.equal((await refused.json()).error, "invalid_token");
    assert.match(refused.headers.get("www-authenticate") ?? "", /another resource/);
    assert.equal(mcp.requests.length, 0, "nothing reached the MCP server");

    const accepted = await call(r.service.url);
    assert.equal(accepted.status, 200, await accepted.text());
  } finally {
    await other.stop();
    await r.close();
    await mcp.close();
    await Deno.remove(kvDir, { recursive: true });
  }
});

Deno.test({
  name:
    "oauth4webapi + Chromium: the device page's redirect (code, state, iss) passes validateAuthResponse",
  ignore: ignoreBrowserTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const browser = await launchBrowser();
    const r = await rig();
    const clientServer = startCallbackServer();
    try {
      const as = await discover(r);
      const redirectUri = clientServer.url;
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

      const response = await codeGrantRequest(as, client, params, redirectUri, verifier);
      const tokens = await oauth.processAuthorizationCodeResponse(as, client, response);
      assert.equal(tokens.token_type, "bearer");
    } finally {
      await browser.close();
      await clientServer.close();
      await r.close();
    }
  },
});
