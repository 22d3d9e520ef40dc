/**
 * The official MCP TypeScript SDK's client-side OAuth (`auth()` with an OAuthClientProvider)
 * against the real service (`main.ts` as a child process) and the simulated GitLab, given only
 * the MCP resource URL `{service}/mcp`: protected resource discovery (RFC 9728, path-aware),
 * authorization server metadata, dynamic registration, authorization through the device page,
 * code exchange and refresh. Runs with REDIRECT_URI_POLICY=registered, the strictest setup.
 */

import assert from "node:assert/strict";
import {
  auth,
  discoverOAuthServerInfo,
  type OAuthClientProvider,
  refreshAuthorization,
} from "@modelcontextprotocol/sdk/client/auth.js";
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";
import type { Browser } from "playwright-core";
import type { SimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { ignoreBrowserTests, launchBrowser, startCallbackServer } from "./_browser.ts";
import { followPageWithoutBrowser, type ServiceWithGitLab, spawnWithGitLab } from "./_service.ts";

/** What the SDK fetched, in order. */
interface Fetched {
  method: string;
  url: string;
  status: number;
}

function recordingFetch(log: Fetched[]): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    const response = await fetch(request);
    log.push({ method: request.method, url: request.url, status: response.status });
    return response;
  };
}

/** How a test takes the user through the authorization URL; resolves with the callback URL. */
type Driver = (authorizationUrl: URL) => Promise<URL>;

/** An in-memory OAuthClientProvider, as an MCP host application would implement it. */
class MemoryProvider implements OAuthClientProvider {
  client?: OAuthClientInformationMixed;
  saved?: OAuthTokens;
  verifier?: string;
  callback?: URL;
  readonly issuedState = crypto.randomUUID();

  constructor(readonly redirectUrl: string, private readonly drive: Driver) {}

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: "MCP SDK test client",
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state(): string {
    return this.issuedState;
  }
  clientInformation(): OAuthClientInformationMixed | undefined {
    return this.client;
  }
  saveClientInformation(info: OAuthClientInformationMixed): void {
    this.client = info;
  }
  tokens(): OAuthTokens | undefined {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens): void {
    this.saved = tokens;
  }
  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier;
  }
  codeVerifier(): string {
    if (!this.verifier) throw new Error("no code verifier saved");
    return this.verifier;
  }
  async redirectToAuthorization(url: URL): Promise<void> {
    this.callback = await this.drive(url);
  }
}

interface Rig extends ServiceWithGitLab {
  serverUrl: string;
}

async function rig(): Promise<Rig> {
  const started = await spawnWithGitLab("mcp-sdk-app", { REDIRECT_URI_POLICY: "registered" });
  return { ...started, serverUrl: `${started.service.url}/mcp` };
}

/** Without a browser: load the page, approve, poll, and return as the page's script would. */
function pollingDriver(gitlab: SimulatedGitLab): Driver {
  return async (url) => (await followPageWithoutBrowser(url, gitlab)).callback;
}

/** In Chromium: open the page, approve at GitLab, wait for the page to send us back. */
function browserDriver(browser: Browser, gitlab: SimulatedGitLab, redirectUrl: string): Driver {
  return async (url) => {
    const page = await browser.newPage();
    try {
      await page.goto(url.href);
      gitlab.approve(gitlab.lastUserCode()!);
      // The page polls 5 s after load, then waits 1 s before redirecting.
      await page.waitForURL((landed) => landed.href.startsWith(redirectUrl), { timeout: 20_000 });
      return new URL(page.url());
    } finally {
      await page.close();
    }
  };
}

/** Runs the whole SDK flow and checks what every MCP host relies on. */
async function signInWithSdk(r: Rig, provider: MemoryProvider, log: Fetched[]): Promise<void> {
  const fetchFn = recordingFetch(log);
  assert.equal(await auth(provider, { serverUrl: r.serverUrl, fetchFn }), "REDIRECT");

  // Discovery went through the path-aware PRM, found at once; the AS through its metadata.
  assert.deepEqual(log.slice(0, 2).map(({ url, status }) => ({ url, status })), [
    { url: `${r.service.url}/.well-known/oauth-protected-resource/mcp`, status: 200 },
    { url: `${r.service.url}/.well-known/oauth-authorization-server`, status: 200 },
  ]);
  assert.deepEqual(log[2], { method: "POST", url: `${r.service.url}/register`, status: 201 });
  assert.ok(provider.client?.client_id, "dynamically registered");

  const callback = provider.callback!;
  assert.ok(callback.href.startsWith(provider.redirectUrl), callback.href);
  assert.equal(callback.searchParams.get("state"), provider.issuedState);
  assert.equal(callback.searchParams.get("iss"), r.service.url);
  const code = callback.searchParams.get("code");
  assert.ok(code);

  assert.equal(
    await auth(provider, { serverUrl: r.serverUrl, authorizationCode: code, fetchFn }),
    "AUTHORIZED",
  );
  const tokens = provider.saved!;
  assert.equal(tokens.token_type, "Bearer");
  assert.equal(tokens.scope, "mcp:tools mcp:resources");
  assert.ok(tokens.refresh_token);
  const claims = JSON.parse(
    new TextDecoder().decode(
      Uint8Array.fromBase64(tokens.access_token.split(".")[1], { alphabet: "base64url" }),
    ),
  );
  assert.equal(claims.iss, r.service.url);
  assert.equal(claims.aud, provider.client!.client_id);

  // The SDK refreshes when it holds a refresh token (e.g. after a 401 from the MCP server).
  const before = tokens.refresh_token!;
  assert.equal(await auth(provider, { serverUrl: r.serverUrl, fetchFn }), "AUTHORIZED");
  assert.ok(provider.saved!.refresh_token);
  assert.notEqual(provider.saved!.refresh_token, before, "refresh tokens rotate");
  assert.ok(
    log.some(({ url, method, status }) =>
      url === `${r.service.url}/token` && method === "POST" && status === 200
    ),
  );
}

Deno.test("MCP SDK: discovery from the resource URL finds the PRM at /.well-known/oauth-protected-resource/mcp and this AS", async () => {
  const r = await rig();
  try {
    const log: Fetched[] = [];
    const info = await discoverOAuthServerInfo(r.serverUrl, { fetchFn: recordingFetch(log) });
    assert.equal(info.authorizationServerUrl, r.service.url);
    assert.equal(info.resourceMetadata?.resource, r.serverUrl);
    assert.deepEqual(info.resourceMetadata?.authorization_servers, [r.service.url]);
    assert.equal(info.authorizationServerMetadata?.issuer, r.service.url);
    assert.equal(
      info.authorizationServerMetadata?.registration_endpoint,
      `${r.service.url}/register`,
    );
    assert.deepEqual(log.map(({ url, status }) => ({ url, status })), [
      { url: `${r.service.url}/.well-known/oauth-protected-resource/mcp`, status: 200 },
      { url: `${r.service.url}/.well-known/oauth-authorization-server`, status: 200 },
    ]);
  } finally {
    await r.close();
  }
});

Deno.test("MCP SDK: auth() — PRM discovery, metadata, registration, page flow, code exchange and refresh (no browser)", async () => {
  const r = await rig();
  try {
    const provider = new MemoryProvider("http://127.0.0.1:9/callback", pollingDriver(r.gitlab));
    await signInWithSdk(r, provider, []);

    // refreshAuthorization, the SDK's lower-level refresh, works with the discovered metadata.
    const info = await discoverOAuthServerInfo(r.serverUrl);
    const refreshed = await refreshAuthorization(info.authorizationServerUrl, {
      metadata: info.authorizationServerMetadata,
      clientInformation: provider.client!,
      refreshToken: provider.saved!.refresh_token!,
      resource: new URL(r.serverUrl),
    });
    assert.ok(refreshed.access_token);
    assert.notEqual(refreshed.refresh_token, provider.saved!.refresh_token);

    // The rotated-out refresh token is dead: the SDK sees invalid_grant.
    await assert.rejects(
      refreshAuthorization(info.authorizationServerUrl, {
        metadata: info.authorizationServerMetadata,
        clientInformation: provider.client!,
        refreshToken: provider.saved!.refresh_token!,
      }),
      (error: Error) =>
        /invalid_grant|Invalid refresh token/i.test(`${error.name} ${error.message}`),
    );
  } finally {
    await r.close();
  }
});

Deno.test({
  name: "MCP SDK + Chromium: auth() signs in through the real device page and refreshes",
  ignore: ignoreBrowserTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const browser = await launchBrowser();
    const r = await rig();
    const client = startCallbackServer("/oauth/callback");
    try {
      const redirectUrl = client.url;
      const provider = new MemoryProvider(
        redirectUrl,
        browserDriver(browser, r.gitlab, redirectUrl),
      );
      await signInWithSdk(r, provider, []);
    } finally {
      await browser.close();
      await client.close();
      await r.close();
    }
  },
});
