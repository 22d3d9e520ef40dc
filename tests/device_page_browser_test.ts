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
