/**
 * CORS as a browser enforces it: a page served from another loopback origin calls discovery,
 * registration, `/token` and `/revoke` from inside Chromium — preflighted where MCP clients'
 * headers require it — and reads success and error bodies; `/oauth/poll` stays closed to it.
 * Skips with a printed reason when Chromium is absent, never under CI.
 */

import assert from "node:assert/strict";
import { ignoreBrowserTests, launchBrowser, startCallbackServer } from "./_browser.ts";
import { signInOverHttp, spawnWithGitLab } from "./_service.ts";

interface Outcome {
  status?: number;
  body?: Record<string, unknown> | null;
  /** Set when the browser refused to hand the response to the page. */
  blocked?: string;
}

/** Runs inside Chromium, on the other origin. */
async function crossOriginCalls(
  { service, refreshToken }: { service: string; refreshToken: string },
): Promise<Record<string, Outcome>> {
  // A header outside the CORS safelist: every request below that sends it is preflighted.
  const mcp = { "MCP-Protocol-Version": "2025-06-18" };
  const form = { ...mcp, "Content-Type": "application/x-www-form-urlencoded" };
  async function call(url: string, init?: RequestInit): Promise<Outcome> {
    try {
      const response = await fetch(url, init);
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    } catch (error) {
      return { blocked: String(error) };
    }
  }
  const refreshWith = (token: string, headers: HeadersInit | undefined = form) =>
    call(`${service}/token`, {
      method: "POST",
      headers,
      body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: token }),
    });
  const results: Record<string, Outcome> = {
    asMetadata: await call(`${service}/.well-known/oauth-authorization-server`, { headers: mcp }),
    prm: await call(`${service}/.well-known/oauth-protected-resource/mcp`, { headers: mcp }),
    register: await call(`${service}/register`, {
      method: "POST",
      headers: { ...mcp, "Content-Type": "application/json" },
      body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:1/cb"], client_name: "web" }),
    }),
    refresh: await refreshWith(refreshToken),
    invalidRefresh: await refreshWith("not-a-token"),
    // No custom header: a "simple" request without preflight, its error still readable.
    reusedRefresh: await refreshWith(refreshToken, undefined),
  };
  const current = String(results.refresh.body?.refresh_token);
  results.revoke = await call(`${service}/revoke`, {
    method: "POST",
    headers: { ...mcp, Authorization: "Bearer ignored" },
    body: new URLSearchParams({ token: current, token_type_hint: "refresh_token" }),
  });
  results.afterRevoke = await refreshWith(current);
  results.poll = await call(`${service}/oauth/poll?flow_state=unknown`);
  return results;
}

Deno.test({
  name:
    "CORS in Chromium: a page on another origin reads metadata, registers, refreshes, sees JSON errors, revokes",
  ignore: ignoreBrowserTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const browser = await launchBrowser();
    const { gitlab, service, close } = await spawnWithGitLab("cors-app");
    const webClient = startCallbackServer("/");
    try {
      // A real refresh token, obtained over HTTP outside the browser.
      const { refresh_token: refreshToken } = await signInOverHttp(service.url, gitlab, {
        redirectUri: "http://127.0.0.1:9/callback",
      });
      const page = await browser.newPage();
      const origin = webClient.origin;
      assert.notEqual(origin, service.url);
      await page.goto(`${origin}/`);
      const results = await page.evaluate(crossOriginCalls, { service: service.url, refreshToken });

      assert.equal(results.asMetadata.status, 200, JSON.stringify(results.asMetadata));
      assert.equal(results.asMetadata.body?.issuer, service.url);
      assert.equal(results.prm.status, 200, JSON.stringify(results.prm));
      assert.deepEqual(results.prm.body?.authorization_servers, [service.url]);
      assert.equal(results.register.status, 201, JSON.stringify(results.register));
      assert.equal(typeof results.register.body?.client_id, "string");

      assert.equal(results.refresh.status, 200, JSON.stringify(results.refresh));
      assert.equal(results.refresh.body?.token_type, "Bearer");
      assert.equal(results.invalidRefresh.status, 400, JSON.stringify(results.invalidRefresh));
      assert.equal(results.invalidRefresh.body?.error, "invalid_grant");
      assert.equal(typeof results.invalidRefresh.body?.error_description, "string");
      // The refresh above rotated the token: reusing it is an error the page can read.
      assert.equal(results.reusedRefresh.status, 400, JSON.stringify(results.reusedRefresh));
      assert.equal(results.reusedRefresh.body?.error, "invalid_grant");
      assert.equal(results.revoke.status, 200, JSON.stringify(results.revoke));
      assert.equal(results.afterRevoke.status, 400, JSON.stringify(results.afterRevoke));
      assert.equal(results.afterRevoke.body?.error, "invalid_grant");
      assert.equal(gitlab.revokedTokens.size, 1);

      // No CORS on the device page's poll endpoint: the browser withholds the response.
      assert.ok(results.poll.blocked, JSON.stringify(results.poll));

      // Chromium really preflighted: the service answered OPTIONS with 204.
      const preflights = service.logs
        .filter((line) => line.includes('"method":"OPTIONS"'))
        .map((line) => JSON.parse(line));
      const preflighted = new Set(
        preflights.filter((entry) => entry.status === 204).map((entry) => entry.path),
      );
      for (
        const path of [
          "/.well-known/oauth-authorization-server",
          "/.well-known/oauth-protected-resource/mcp",
          "/register",
          "/token",
          "/revoke",
        ]
      ) {
        assert.ok(preflighted.has(path), `no preflight for ${path}: ${[...preflighted]}`);
      }
    } finally {
      await browser.close();
      await webClient.close();
      await close();
    }
  },
});

/** Runs inside Chromium, on the other origin: the status and `Retry-After` of each answer. */
async function retryAfterCalls(
  { service, accessToken }: { service: string; accessToken: string },
): Promise<Record<string, { status?: number; retryAfter?: string | null; blocked?: string }>> {
  async function call(url: string, init: RequestInit) {
    try {
      const response = await fetch(url, init);
      await response.text();
      return { status: response.status, retryAfter: response.headers.get("Retry-After") };
    } catch (error) {
      return { blocked: String(error) };
    }
  }
  const register = () =>
    call(`${service}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:1/cb"] }),
    });
  const mcp = () =>
    call(`${service}/mcp`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${accessToken}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
    });
  const token = () =>
    call(`${service}/token`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: "x" }),
    });
  return {
    registered: await register(),
    registerLimited: await register(),
    tokenRefused: await token(),
    tokenLimited: await token(),
    mcpServerBusy: await mcp(),
    mcpLimited: await mcp(),
  };
}

Deno.test({
  name:
    "CORS in Chromium: a page on another origin reads Retry-After of a 429 (/register, /token, the gateway) and of the MCP server's 503",
  ignore: ignoreBrowserTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const browser = await launchBrowser();
    // An MCP server that is busy: 503 with its own Retry-After, relayed by the gateway.
    const mcpServer = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      () => new Response("busy", { status: 503, headers: { "Retry-After": "7" } }),
    );
    const { gitlab, service, close } = await spawnWithGitLab("cors-retry-app", {
      MCP_UPSTREAM_URL: `http://127.0.0.1:${mcpServer.addr.port}/mcp`,
      RATE_LIMIT_LOOPBACK: "limit",
      RATE_LIMIT_REGISTER: "1/600",
      // The sign-in's code exchange and the page's first refresh; the next is limited.
      RATE_LIMIT_TOKEN: "2/600",
      RATE_LIMIT_MCP: "1/60",
    });
    const webClient = startCallbackServer("/");
    try {
      const { access_token: accessToken } = await signInOverHttp(service.url, gitlab);
      const page = await browser.newPage();
      await page.goto(`${webClient.origin}/`);
      const results = await page.evaluate(retryAfterCalls, { service: service.url, accessToken });
      const seen = JSON.stringify(results);
      assert.equal(results.registered.status, 201, seen);
      assert.equal(results.tokenRefused.status, 400, seen);
      assert.equal(results.mcpServerBusy.status, 503, seen);
      assert.equal(results.mcpServerBusy.retryAfter, "7", seen);
      for (const name of ["registerLimited", "tokenLimited", "mcpLimited"]) {
        assert.equal(results[name].status, 429, `${name}: ${seen}`);
        assert.match(results[name].retryAfter ?? "", /^[1-9]\d*$/, `${name}: ${seen}`);
      }
    } finally {
      await browser.close();
      await webClient.close();
      await close();
      await mcpServer.shutdown();
    }
  },
});
