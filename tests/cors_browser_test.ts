/**
 * CORS as a browser enforces it: a page served from another loopback origin calls discovery,
 * registration, `/token` and `/revoke` from inside Chromium — preflighted where MCP clients'
 * headers require it — and reads success and error bodies; `/oauth/poll` stays closed to it.
 * Skips with a printed reason when Chromium is absent, never under CI.
 */

import assert from "node:assert/strict";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { launchBrowser } from "./_browser.ts";
import { authorizeQuery, flowDataFromPage, PKCE, TEST_SECRET } from "./_helpers.ts";
import { type ServiceProcess, spawnService } from "./_service.ts";

const REDIRECT = "http://127.0.0.1:9/callback";

/** A real refresh token, obtained over HTTP outside the browser. */
async function signIn(
  service: ServiceProcess,
  gitlab: ReturnType<typeof startSimulatedGitLab>,
): Promise<string> {
  const page = await fetch(
    `${service.url}/authorize?${authorizeQuery({ redirect_uri: REDIRECT })}`,
  );
  const { flowState } = flowDataFromPage(await page.text());
  gitlab.approve(gitlab.lastUserCode()!);
  const done = await (await fetch(`${service.url}/oauth/poll?flow_state=${flowState}`)).json();
  const response = await fetch(`${service.url}/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: done.code,
      code_verifier: PKCE.verifier,
      redirect_uri: REDIRECT,
    }),
  });
  assert.equal(response.status, 200);
  return (await response.json()).refresh_token;
}

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
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const browser = await launchBrowser();
    if ("skip" in browser) {
      // deno-lint-ignore no-console -- the reason a test did not run must be visible.
      console.log(`skipping ${t.name}: ${browser.skip}`);
      return;
    }
    const gitlab = startSimulatedGitLab();
    const service = await spawnService({
      GITLAB_URL: gitlab.url.href,
      GITLAB_CLIENT_ID: "cors-app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: ":memory:",
    });
    const webClient = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      () =>
        new Response("<!doctype html><title>web MCP client</title>", {
          headers: { "Content-Type": "text/html" },
        }),
    );
    try {
      const refreshToken = await signIn(service, gitlab);
      const page = await browser.newPage();
      const origin = `http://127.0.0.1:${webClient.addr.port}`;
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
      await webClient.shutdown();
      await service.stop();
      await gitlab.close();
    }
  },
});
