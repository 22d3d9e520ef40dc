/**
 * Our device authorization endpoint (issue 36) end to end: oauth4webapi's device-flow functions
 * as the CLI, and the user's side in a real browser (Chromium through playwright-core) against
 * the service as a process and the simulated GitLab, in both sign-in modes: the code link, the
 * page's client and warning, "Continue with GitLab", GitLab's Authorize (redirect) or GitLab's
 * device page (device mode), our Approve, and the CLI's poll; the token then calls a tool
 * through /mcp. Ignored without Chromium, except under CI.
 */

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import * as oauth from "oauth4webapi";
import type { Page } from "playwright-core";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { type BrowserRig, ignoreBrowserTests, startBrowserRig } from "./_browser.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";

/** oauth4webapi talks to the service on loopback over http. */
const INSECURE = { [oauth.allowInsecureRequests]: true };

interface Started {
  as: oauth.AuthorizationServer;
  client: oauth.Client;
  device_code: string;
  verification_uri_complete: string;
}

/** A CLI's start, with oauth4webapi: registration, discovery, the device authorization. */
async function startDeviceAuthorization(base: string): Promise<Started> {
  const registered = await (await fetch(`${base}/register`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ client_name: "build-box agent", grant_types: [DEVICE_CODE_GRANT_TYPE] }),
  })).json();
  const issuer = new URL(base);
  const as = await oauth.processDiscoveryResponse(
    issuer,
    await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...INSECURE }),
  );
  const client: oauth.Client = {
    client_id: registered.client_id,
    token_endpoint_auth_method: "none",
  };
  const started = await oauth.processDeviceAuthorizationResponse(
    as,
    client,
    await oauth.deviceAuthorizationRequest(as, client, oauth.None(), {}, INSECURE),
  );
  assert.ok(started.verification_uri_complete);
  return {
    as,
    client,
    device_code: started.device_code,
    verification_uri_complete: started.verification_uri_complete,
  };
}

/** The CLI's poll once the user approved, with oauth4webapi: the access token. */
async function redeem({ as, client, device_code }: Started): Promise<string> {
  const tokens = await oauth.processDeviceCodeResponse(
    as,
    client,
    await oauth.deviceCodeGrantRequest(as, client, oauth.None(), device_code, INSECURE),
  );
  return tokens.access_token;
}

async function callTool(base: string, accessToken: string): Promise<void> {
  const client = new Client({ name: "device-browser-test", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${accessToken}` } },
    }),
  );
  try {
    const result = await client.callTool({ name: "whoami", arguments: {} });
    assert.equal(result.isError ?? false, false, JSON.stringify(result));
  } finally {
    await client.close();
  }
}

/** The page a code link opens: client, access and warning, before any GitLab page. */
async function assertAskingPage(page: Page): Promise<void> {
  assert.match(await page.textContent("#client") ?? "", /build-box agent/);
  assert.match(await page.textContent("#access") ?? "", /tools/);
  assert.match(await page.textContent("#device-warning") ?? "", /on a device you own/);
  assert.equal(await page.getByRole("button", { name: "Approve" }).count(), 0);
}

/** After signing in: our Approve, and the last page. */
async function approveHere(page: Page): Promise<void> {
  await page.locator("#signed-in").waitFor({ timeout: 20_000 });
  await Promise.all([
    page.waitForURL((url) => url.pathname === "/device"),
    page.getByRole("button", { name: "Approve" }).click(),
  ]);
  await page.getByRole("heading", { name: "Device signed in" }).waitFor();
}

function deviceBrowserTest(
  name: string,
  env: Record<string, string>,
  body: (r: BrowserRig, page: Page, started: Started) => Promise<void>,
): void {
  Deno.test({
    name,
    ignore: ignoreBrowserTests,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      const mcp = startMcpUpstream();
      const r = await startBrowserRig({ ...env, MCP_UPSTREAM_URL: mcp.url });
      try {
        const started = await startDeviceAuthorization(r.service.url);
        const page = await r.browser.newPage();
        await page.goto(started.verification_uri_complete);
        await assertAskingPage(page);
        await body(r, page, started);
        await callTool(r.service.url, await redeem(started));
      } finally {
        await r.close();
        await mcp.close();
      }
    },
  });
}

deviceBrowserTest(
  "device browser (redirect sign-in): code link → Continue → GitLab Authorize → our Approve → tokens → a tool",
  { GITLAB_SIGN_IN: "redirect", GITLAB_CLIENT_SECRET: "browser-secret" },
  async (r, page) => {
    await Promise.all([
      page.waitForURL((url) => url.href.startsWith(r.gitlab.url.origin)),
      page.getByRole("button", { name: "Continue with GitLab" }).click(),
    ]);
    await Promise.all([
      page.waitForURL((url) => url.href.startsWith(r.service.url)),
      page.getByRole("button", { name: "Authorize" }).click(),
    ]);
    await approveHere(page);
  },
);

deviceBrowserTest(
  "device browser (GitLab device flow): code link → Continue → GitLab's code page → our Approve → tokens → a tool",
  {},
  async (r, page) => {
    await page.getByRole("button", { name: "Continue with GitLab" }).click();
    await page.locator("#verify-link").waitFor();
    const [popup] = await Promise.all([page.waitForEvent("popup"), page.click("#verify-link")]);
    await popup.waitForLoadState();
    await popup.getByRole("button", { name: "Authorize" }).click();
    await popup.getByRole("heading", { name: "Device approved" }).waitFor({ timeout: 15_000 });
    await popup.close();
    // The page polls 5 s after load, then returns to /device.
    await approveHere(page);
    assert.equal(r.gitlab.calls.authorizationCode, 0, "no redirect sign-in in device mode");
  },
);
