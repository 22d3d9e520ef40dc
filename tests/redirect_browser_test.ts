/**
 * The redirect sign-in (GITLAB_SIGN_IN=redirect) in a real browser (Chromium through
 * playwright-core) against the real service and the simulated GitLab: consent page → GitLab's
 * Authorize → callback → client with code, state and iss → /token; the second sign-in skipping the
 * consent page; Cancel and GitLab's Deny; a callback without the browser's cookie; a replayed
 * callback; consent POSTs without or with a wrong CSRF token; an account this service refuses
 * reading our page. Reported as ignored when Chromium is absent, except under CI, where they
 * fail.
 */

import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { type BrowserRig, browserRigTest } from "./_browser.ts";
import { authorizeQuery, consentFormOf } from "./_helpers.ts";
import { exchangeOverHttp } from "./_service.ts";

type Rig = BrowserRig;

function authorizeUrl(r: Rig, state = "st-42"): string {
  return `${r.service.url}/authorize?${
    authorizeQuery({ client_id: "browser-client", redirect_uri: r.callback, state })
  }`;
}

/** A browser test in redirect mode: ignored without Chromium. */
function browserTest(name: string, body: (r: Rig, page: Page) => Promise<void>): void {
  browserRigTest(name, body, { GITLAB_SIGN_IN: "redirect" });
}

async function clickAndWaitFor(page: Page, button: string, origin: string): Promise<void> {
  await Promise.all([
    page.waitForURL((url) => url.href.startsWith(origin), { timeout: 15_000 }),
    page.getByRole("button", { name: button }).click(),
  ]);
}

/** Where the browser landed at the client: its query. */
function landedAt(page: Page, r: Rig): URLSearchParams {
  const landed = new URL(page.url());
  assert.equal(`${landed.origin}${landed.pathname}`, r.callback);
  return landed.searchParams;
}

browserTest(
  "redirect browser: consent → GitLab Authorize → client with code, state, iss → /token; the second sign-in skips the consent page",
  async (r, page) => {
    await page.goto(authorizeUrl(r));
    assert.match(await page.textContent("#client") ?? "", /browser-client/);
    assert.match(await page.textContent("#scopes") ?? "", /api/);
    await clickAndWaitFor(page, "Continue with GitLab", r.gitlab.url.origin);
    await clickAndWaitFor(page, "Authorize", r.callback);
    const landed = landedAt(page, r);
    assert.deepEqual([...landed.keys()], ["code", "state", "iss"]);
    assert.equal(landed.get("state"), "st-42");
    assert.equal(landed.get("iss"), r.service.url);
    const tokens = await exchangeOverHttp(r.service.url, landed.get("code") ?? "", r.callback);
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
    assert.equal(tokens.body.token_type, "Bearer");

    await page.goto(authorizeUrl(r, "st-43"));
    assert.ok(page.url().startsWith(`${r.gitlab.url.origin}/oauth/authorize`), page.url());
    await clickAndWaitFor(page, "Authorize", r.callback);
    assert.equal(landedAt(page, r).get("state"), "st-43");
    assert.equal(r.gitlab.calls.authorizationCode, 2);
    assert.equal(r.gitlab.calls.authorizeDevice, 0, "no device flow in redirect mode");
  },
);

/** Asserts the browser landed at the client with `access_denied`, the state and the issuer. */
function assertDenied(page: Page, r: Rig): void {
  assert.deepEqual(Object.fromEntries(landedAt(page, r)), {
    error: "access_denied",
    state: "st-42",
    iss: r.service.url,
  });
  assert.equal(r.gitlab.calls.authorizationCode, 0);
}

browserTest("redirect browser: Cancel → client with access_denied, state, iss", async (r, page) => {
  await page.goto(authorizeUrl(r));
  await clickAndWaitFor(page, "Cancel", r.callback);
  assertDenied(page, r);
  assert.equal(r.gitlab.calls.authorizePage, 0, "GitLab never asked");
});

browserTest(
  "redirect browser: Deny at GitLab → client with access_denied, state, iss",
  async (r, page) => {
    await page.goto(authorizeUrl(r));
    await clickAndWaitFor(page, "Continue with GitLab", r.gitlab.url.origin);
    await clickAndWaitFor(page, "Deny", r.callback);
    assertDenied(page, r);
  },
);

browserTest(
  "redirect browser: a callback without the browser's cookie gets the 400 page, never the client",
  async (r, page) => {
    await page.goto(authorizeUrl(r));
    await clickAndWaitFor(page, "Continue with GitLab", r.gitlab.url.origin);
    await page.context().clearCookies();
    const [answer] = await Promise.all([
      page.waitForResponse((response) => response.url().includes("/oauth/callback")),
      page.getByRole("button", { name: "Authorize" }).click(),
    ]);
    assert.equal(answer.status(), 400);
    await page.locator("#message").waitFor();
    assert.match(await page.textContent("#message") ?? "", /not started in this browser/);
    assert.ok(page.url().startsWith(`${r.service.url}/oauth/callback`), page.url());
    assert.equal(r.gitlab.calls.authorizationCode, 0, "GitLab's code is never exchanged");
  },
);

browserTest("redirect browser: a replayed callback gets the 400 page", async (r, page) => {
  const callbacks: string[] = [];
  page.on("request", (request) => {
    if (request.url().includes("/oauth/callback")) callbacks.push(request.url());
  });
  await page.goto(authorizeUrl(r));
  await clickAndWaitFor(page, "Continue with GitLab", r.gitlab.url.origin);
  await clickAndWaitFor(page, "Authorize", r.callback);
  assert.equal(callbacks.length, 1);

  const replay = await page.goto(callbacks[0]);
  assert.equal(replay?.status(), 400);
  assert.match(await page.textContent("#message") ?? "", /already used/);
  assert.equal(r.gitlab.calls.authorizationCode, 1);
});

browserTest(
  "redirect browser: a consent POST without or with a wrong CSRF token is refused; the page's own goes on",
  async (r, page) => {
    await page.goto(authorizeUrl(r));
    const form = consentFormOf(await page.content());
    // The browser's own cookies go along: only the token is missing or wrong.
    const post = (fields: Record<string, string>) =>
      page.context().request.post(`${r.service.url}/oauth/consent`, {
        form: fields,
        maxRedirects: 0,
      });
    for (const fields of [{ sign_in: form.sign_in }, { ...form, csrf_token: "wrong" }]) {
      const answer = await post({ ...fields, action: "continue" });
      assert.equal(answer.status(), 400);
      assert.equal(answer.headers()["location"], undefined);
      assert.match(await answer.text(), /cross-site request forgery/);
    }
    await clickAndWaitFor(page, "Continue with GitLab", r.gitlab.url.origin);
  },
);

browserTest(
  "redirect browser: Cancel reaches a client whose redirect URI is on [::1] (a loopback host the service accepts)",
  async (r, page) => {
    const client = Deno.serve(
      { hostname: "::1", port: 0, onListen() {} },
      () => new Response("<p>callback reached</p>", { headers: { "Content-Type": "text/html" } }),
    );
    const callback = `http://[::1]:${client.addr.port}/callback`;
    try {
      const query = authorizeQuery({ client_id: "browser-client", redirect_uri: callback });
      await page.goto(`${r.service.url}/authorize?${query}`);
      await clickAndWaitFor(page, "Cancel", callback);
      assert.equal(new URL(page.url()).searchParams.get("error"), "access_denied");
    } finally {
      await client.shutdown();
    }
  },
);

browserRigTest(
  "redirect browser: an account this service refuses reads our page, whose link brings access_denied, state and iss",
  async (r, page) => {
    await page.goto(authorizeUrl(r));
    await clickAndWaitFor(page, "Continue with GitLab", r.gitlab.url.origin);
    await clickAndWaitFor(page, "Authorize", r.service.url);
    // Our page, staying put: no redirect of its own, the reason in words.
    assert.ok(page.url().startsWith(`${r.service.url}/oauth/callback`), page.url());
    assert.match(await page.textContent("h1") ?? "", /Sign-in refused by this service/);
    assert.match(
      await page.textContent("#message") ?? "",
      /The GitLab account @\w+ is not allowed to sign in here: this service admits only the accounts it lists/,
    );
    await Promise.all([
      page.waitForURL((url) => url.href.startsWith(r.callback), { timeout: 10_000 }),
      page.getByRole("link", { name: "Return to the application" }).click(),
    ]);
    const landed = landedAt(page, r);
    assert.deepEqual([...landed.keys()], ["error", "error_description", "state", "iss"]);
    assert.equal(landed.get("error"), "access_denied");
    assert.match(landed.get("error_description") ?? "", /is not allowed to sign in here/);
    assert.equal(landed.get("state"), "st-42");
    assert.equal(landed.get("iss"), r.service.url);
  },
  { GITLAB_SIGN_IN: "redirect", ALLOWED_GITLAB_USERS: "id:999999" },
);
