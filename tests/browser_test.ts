/**
 * The device page in a real browser (Chromium through playwright-core): countdown, polling,
 * approval at the simulated GitLab in a new tab, redirect to the client with code and state.
 * Skips with a printed reason when Chromium is absent, never under CI.
 */

import assert from "node:assert/strict";
import type { Browser, Page } from "playwright-core";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { launchBrowser } from "./_browser.ts";
import { PKCE, TEST_SECRET } from "./_helpers.ts";
import { type ServiceProcess, spawnService } from "./_service.ts";

interface Rig {
  browser: Browser;
  service: ServiceProcess;
  gitlab: ReturnType<typeof startSimulatedGitLab>;
  /** A client's redirect target on loopback. */
  callback: string;
  close(): Promise<void>;
}

async function rig(t: Deno.TestContext): Promise<Rig | undefined> {
  const browser = await launchBrowser();
  if ("skip" in browser) {
    // deno-lint-ignore no-console -- the reason a test did not run must be visible.
    console.log(`skipping ${t.name}: ${browser.skip}`);
    return undefined;
  }
  const gitlab = startSimulatedGitLab();
  const service = await spawnService({
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "browser-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
  });
  const client = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () =>
      new Response("<!doctype html><title>client</title><p>callback reached</p>", {
        headers: { "Content-Type": "text/html" },
      }),
  );
  return {
    browser,
    service,
    gitlab,
    callback: `http://127.0.0.1:${client.addr.port}/callback`,
    async close() {
      await browser.close();
      await service.stop();
      await gitlab.close();
      await client.shutdown();
    },
  };
}

function authorizeUrl(r: Rig, params: Record<string, string> = {}): string {
  return `${r.service.url}/authorize?${new URLSearchParams({
    response_type: "code",
    client_id: "browser-client",
    code_challenge: PKCE.challenge,
    code_challenge_method: "S256",
    redirect_uri: r.callback,
    state: "st-42",
    ...params,
  })}`;
}

async function approveInNewTab(page: Page, r: Rig, decision: "Approve" | "Deny") {
  const [popup] = await Promise.all([page.waitForEvent("popup"), page.click("#verify-link")]);
  await popup.waitForLoadState();
  assert.ok(popup.url().startsWith(r.gitlab.url.origin), popup.url());
  await popup.getByRole("button", { name: decision }).click();
  await popup.waitForLoadState();
  await popup.close();
}

Deno.test({
  name: "browser: page shows the code, counts down, and after approval lands on redirect_uri",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const r = await rig(t);
    if (!r) return;
    try {
      const page = await r.browser.newPage();
      await page.goto(authorizeUrl(r));
      assert.equal((await page.textContent("#user-code"))?.trim(), r.gitlab.lastUserCode());
      const steps = await page.locator("#steps li").count();
      assert.equal(steps, 5);

      const before = await page.textContent("#countdown");
      await page.locator("#countdown", { hasNotText: before ?? "" }).waitFor({ timeout: 3_000 });
      const after = await page.textContent("#countdown");
      assert.ok(toSeconds(after) < toSeconds(before), `${before} → ${after}`);

      await approveInNewTab(page, r, "Approve");
      // The page polls 5 s after load, then waits 1 s before redirecting.
      await page.waitForURL((url) => url.href.startsWith(r.callback), { timeout: 20_000 });
      const landed = new URL(page.url());
      assert.equal(landed.searchParams.get("state"), "st-42");
      const code = landed.searchParams.get("code");
      assert.ok(code);

      const response = await fetch(`${r.service.url}/token`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "authorization_code",
          code,
          code_verifier: PKCE.verifier,
          redirect_uri: r.callback,
        }),
      });
      assert.equal(response.status, 200);
      assert.equal((await response.json()).token_type, "Bearer");
    } finally {
      await r.close();
    }
  },
});

Deno.test({
  name: "browser: denied at GitLab → 'Authentication failed: access_denied', polling stops",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const r = await rig(t);
    if (!r) return;
    try {
      const page = await r.browser.newPage();
      await page.goto(authorizeUrl(r));
      await approveInNewTab(page, r, "Deny");
      await page.locator("#status", { hasText: "Authentication failed" }).waitFor({
        timeout: 15_000,
      });
      assert.match(
        (await page.textContent("#status")) ?? "",
        /Authentication failed: access_denied/,
      );
      const polls = r.gitlab.calls.deviceToken;
      await page.waitForTimeout(6_000);
      assert.equal(r.gitlab.calls.deviceToken, polls, "no polling after failure");
      assert.ok(page.url().startsWith(r.service.url), "stayed on the page");
    } finally {
      await r.close();
    }
  },
});

Deno.test({
  name: "browser: hostile state and redirect_uri run no script and round-trip unchanged",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const r = await rig(t);
    if (!r) return;
    try {
      const page = await r.browser.newPage();
      const dialogs: string[] = [];
      page.on("dialog", (dialog) => {
        dialogs.push(dialog.message());
        void dialog.dismiss();
      });
      const state = `"'><script>alert(1)</script></script><img src=x onerror=alert(2)>\u2028`;
      const redirect = `${r.callback}?x="><script>alert(3)</script>`;
      await page.goto(authorizeUrl(r, { state, redirect_uri: redirect }));
      r.gitlab.approve(r.gitlab.lastUserCode()!);
      await page.waitForURL((url) => url.href.startsWith(r.callback), { timeout: 20_000 });
      const landed = new URL(page.url());
      assert.equal(landed.searchParams.get("state"), state, landed.href);
      assert.equal(landed.searchParams.get("x"), `"><script>alert(3)</script>`);
      assert.deepEqual(dialogs, []);
    } finally {
      await r.close();
    }
  },
});

function toSeconds(mmss: string | null): number {
  const [minutes, seconds] = (mmss ?? "").trim().split(":").map(Number);
  return minutes * 60 + seconds;
}
