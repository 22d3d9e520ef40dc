/**
 * The device page in a real browser (Chromium through playwright-core): countdown, polling,
 * approval at the simulated GitLab in a new tab, redirect to the client with code and state.
 * Reported as ignored when Chromium is absent, except under CI, where they fail.
 */

import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { type BrowserRig, browserRigTest } from "./_browser.ts";
import { authorizeQuery } from "./_helpers.ts";
import { exchangeOverHttp } from "./_service.ts";

type Rig = BrowserRig;

function authorizeUrl(r: Rig, params: Record<string, string> = {}): string {
  return `${r.service.url}/authorize?${
    authorizeQuery({
      client_id: "browser-client",
      redirect_uri: r.callback,
      state: "st-42",
      ...params,
    })
  }`;
}

const browserTest = browserRigTest;

async function approveInNewTab(page: Page, r: Rig, decision: "Authorize" | "Deny") {
  const [popup] = await Promise.all([page.waitForEvent("popup"), page.click("#verify-link")]);
  await popup.waitForLoadState();
  assert.ok(popup.url().startsWith(r.gitlab.url.origin), popup.url());
  await popup.getByRole("button", { name: decision }).click();
  // Closed once GitLab's answer has loaded: Chromium may never finish closing a page whose
  // form post is still under way (waitForLoadState alone can answer for the form's own page).
  const answer = decision === "Authorize" ? "Device approved" : "Device denied";
  await popup.getByRole("heading", { name: answer }).waitFor({ timeout: 15_000 });
  await popup.close();
}

browserTest(
  "browser: page shows the code, counts down, and after approval lands on redirect_uri",
  async (r, page) => {
    await page.goto(authorizeUrl(r));
    assert.equal((await page.textContent("#user-code"))?.trim(), r.gitlab.lastUserCode());
    const steps = await page.locator("#steps li").count();
    assert.equal(steps, 5);

    const before = await page.textContent("#countdown");
    await page.locator("#countdown", { hasNotText: before ?? "" }).waitFor({ timeout: 3_000 });
    const after = await page.textContent("#countdown");
    assert.ok(toSeconds(after) < toSeconds(before), `${before} → ${after}`);

    await approveInNewTab(page, r, "Authorize");
    // The page polls 5 s after load, then waits 1 s before redirecting.
    await page.waitForURL((url) => url.href.startsWith(r.callback), { timeout: 20_000 });
    const landed = new URL(page.url());
    assert.equal(landed.searchParams.get("state"), "st-42");
    const code = landed.searchParams.get("code");
    assert.ok(code);

    const response = await exchangeOverHttp(r.service.url, code, r.callback);
    assert.equal(response.status, 200);
    assert.equal(response.body.token_type, "Bearer");
  },
);

browserTest(
  "browser: denied at GitLab → 'Authentication failed: access_denied', polling stops",
  async (r, page) => {
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
  },
);

browserTest(
  "browser: hostile state and redirect_uri run no script and round-trip unchanged",
  async (r, page) => {
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
  },
);

function toSeconds(mmss: string | null): number {
  const [minutes, seconds] = (mmss ?? "").trim().split(":").map(Number);
  return minutes * 60 + seconds;
}
