/**
 * The device page in Chromium names who is asking: for a Client ID Metadata Document client,
 * its `client_name` and the host of its `client_id` URL as verified; for a client that
 * registered itself, its name as unverified. Ignored without Chromium, except under CI.
 */

import assert from "node:assert/strict";
import { ignoreBrowserTests, launchBrowser } from "./_browser.ts";
import { authorizeQuery, TEST_REDIRECT } from "./_helpers.ts";
import { fetchJson, spawnWithGitLab } from "./_service.ts";
import { startDocumentServer } from "./_tls.ts";

const DOC_PATH = "/oauth/client.json";

Deno.test({
  name:
    "cimd browser: verified host for a metadata document client, unverified for a registered name",
  ignore: ignoreBrowserTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const docs = await startDocumentServer();
    const clientId = `${docs.origin}${DOC_PATH}`;
    docs.route(DOC_PATH, () =>
      Response.json({
        client_id: clientId,
        client_name: "Claude",
        redirect_uris: [TEST_REDIRECT],
      }));
    const browser = await launchBrowser();
    const { service, close } = await spawnWithGitLab("cimd-browser-app", {
      CLIENT_METADATA_ALLOW_PRIVATE: "true",
      DENO_CERT: await docs.caFile(),
    });
    try {
      const page = await browser.newPage();
      await page.goto(`${service.url}/authorize?${authorizeQuery({ client_id: clientId })}`);
      assert.equal((await page.textContent("#client strong bdi"))?.trim(), "Claude");
      const verified = await page.locator("#client-verified").innerText();
      assert.match(verified, /Verified/);
      assert.ok(verified.includes(new URL(clientId).host), verified);
      assert.equal(await page.locator("#client-unverified").count(), 0);

      const registered = await fetchJson(`${service.url}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ redirect_uris: [TEST_REDIRECT], client_name: "Claude" }),
      });
      assert.equal(registered.status, 201);
      await page.goto(
        `${service.url}/authorize?${authorizeQuery({ client_id: registered.body.client_id })}`,
      );
      assert.equal((await page.textContent("#client strong bdi"))?.trim(), "Claude");
      assert.match(await page.locator("#client-unverified").innerText(), /unverified/);
      assert.equal(await page.locator("#client-verified").count(), 0);
    } finally {
      await browser.close();
      await close();
      await docs.close();
    }
  },
});
