/**
 * The device page's script in Chromium against the real service and the simulated GitLab, for
 * what the page does with the client's return address: a scheme the server calls unsafe is
 * never opened. Ignored without Chromium, except under CI.
 */

import assert from "node:assert/strict";
import { browserRigTest } from "./_browser.ts";
import { authorizeQuery } from "./_helpers.ts";

browserRigTest(
  "device page: a blob: redirect_uri, shown as an address the page will not open, is not opened",
  async (r, page) => {
    const blob = `blob:${r.service.url}/0b6e6f2a-7b5e-4c1e-9a51-3c9e3f7d2a11`;
    await page.goto(
      `${r.service.url}/authorize?${
        authorizeQuery({ client_id: "browser-client", redirect_uri: blob })
      }`,
    );
    assert.match(
      await page.locator("#client").innerText(),
      /return to: an address this page will not open \(blob:\)/,
    );
    r.gitlab.approve(r.gitlab.lastUserCode() ?? "");
    await page.locator("#status", { hasText: "Authentication failed" }).waitFor({
      timeout: 15_000,
    });
    assert.equal(
      (await page.textContent("#status"))?.trim(),
      "Authentication failed: invalid redirect_uri",
    );
    assert.ok(page.url().startsWith(r.service.url), `navigated to ${page.url()}`);
  },
);

browserRigTest(
  "device page: denied at GitLab → says so, and 'Return to the application' brings error=access_denied, state and iss",
  async (r, page) => {
    await page.goto(
      `${r.service.url}/authorize?${
        authorizeQuery({ client_id: "browser-client", redirect_uri: r.callback, state: "st-7" })
      }`,
    );
    assert.equal(await page.locator("#return-link").isVisible(), false, "hidden while pending");
    const [popup] = await Promise.all([page.waitForEvent("popup"), page.click("#verify-link")]);
    await popup.waitForLoadState();
    await popup.getByRole("button", { name: "Deny" }).click();
    // Closed once GitLab's answer has loaded: Chromium may never finish closing a page whose
    // form post is still under way (a hang seen about once in six runs).
    await popup.getByRole("heading", { name: "Device denied" }).waitFor({ timeout: 15_000 });
    await popup.close();

    await page.locator("#status", { hasText: "Authentication failed" }).waitFor({
      timeout: 15_000,
    });
    assert.equal(
      (await page.textContent("#status"))?.trim(),
      "Authentication failed: access_denied",
    );
    assert.match(
      await page.locator("#failure-help").innerText(),
      /denied on GitLab, so the application got no access to your account/,
    );
    assert.equal(await page.locator("#help-expired").isVisible(), false);
    assert.ok(page.url().startsWith(r.service.url), "no navigation of its own");

    await Promise.all([
      page.waitForURL((url) => url.href.startsWith(r.callback), { timeout: 10_000 }),
      page.getByRole("link", { name: "Return to the application" }).click(),
    ]);
    const landed = new URL(page.url());
    assert.equal(`${landed.origin}${landed.pathname}`, r.callback);
    assert.deepEqual([...landed.searchParams], [
      ["error", "access_denied"],
      ["state", "st-7"],
      ["iss", r.service.url],
    ]);
  },
);

browserRigTest(
  "device page: an account this service refuses is told so, not that GitLab failed",
  async (r, page) => {
    await page.goto(
      `${r.service.url}/authorize?${
        authorizeQuery({ client_id: "browser-client", redirect_uri: r.callback, state: "st-8" })
      }`,
    );
    r.gitlab.approve(r.gitlab.lastUserCode() ?? "");
    await page.locator("#status", { hasText: "refused" }).waitFor({ timeout: 15_000 });
    assert.match(
      (await page.textContent("#status")) ?? "",
      /^Sign-in refused by this service: The GitLab account @\w+ is not allowed to sign in here: this service admits only the accounts it lists/,
    );
    const help = await page.locator("#failure-help").innerText();
    assert.match(help, /This service refused the account/);
    assert.doesNotMatch(help, /did not complete the sign-in/);
    assert.equal(await page.locator("#help-failed").isVisible(), false);
    assert.ok(await page.locator("#return-link").isVisible());
  },
  { ALLOWED_GITLAB_USERS: "id:999999" },
);
