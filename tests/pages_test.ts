/**
 * What the device page and the consent page say over HTTP against the app: a client id that is
 * neither registered nor a metadata document is shown as an unknown, unverified client; the
 * upstream's scopes in words; and the device page's return link after a failed sign-in, built
 * from the redirect URI /authorize stored (RFC 6749 §4.1.2.1, RFC 9207).
 */

import assert from "node:assert/strict";
import { authorizeQuery, TEST_BASE, TEST_REDIRECT, type TestApp, withApp } from "./_helpers.ts";
import { escapeHtml } from "../src/pages/mod.ts";

async function page(t: TestApp, overrides: Record<string, string | null> = {}): Promise<string> {
  const response = await t.app(new Request(`${TEST_BASE}/authorize?${authorizeQuery(overrides)}`));
  const html = await response.text();
  assert.equal(response.status, 200, html);
  return html;
}

async function register(t: TestApp, metadata: Record<string, unknown>): Promise<string> {
  const response = await t.app(
    new Request(`${TEST_BASE}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ redirect_uris: [TEST_REDIRECT], ...metadata }),
    }),
  );
  assert.equal(response.status, 201);
  return (await response.json()).client_id;
}

/** The text of the element with `id`, tags dropped. */
function textOf(html: string, id: string): string | undefined {
  const match = html.match(new RegExp(`<(\\w+)\\b[^>]*\\bid="${id}"[^>]*>([\\s\\S]*?)</\\1>`));
  return match?.[2].replace(/<[^>]*>/g, "");
}

/** The href of the return link, HTML-unescaped, or undefined. */
function returnLink(html: string): string | undefined {
  const href = html.match(/<a\b[^>]*\bid="return-link"[^>]*\bhref="([^"]*)"/)?.[1];
  return href?.replaceAll("&amp;", "&").replaceAll("&quot;", '"').replaceAll("&#39;", "'")
    .replaceAll("&lt;", "<").replaceAll("&gt;", ">");
}

for (const mode of ["device", "redirect"] as const) {
  const env: Record<string, string> = mode === "redirect" ? { GITLAB_SIGN_IN: "redirect" } : {};

  Deno.test(`${mode} page: an unregistered client id is shown as an unknown, unverified client`, () =>
    withApp(async (t) => {
      const html = await page(t, { client_id: "Claude" });
      assert.match(textOf(html, "client-unknown") ?? "", /Unknown and unverified/);
      assert.ok(html.includes("<code><bdi>Claude</bdi></code>"), "the id is shown as an id");
      assert.doesNotMatch(html, /<strong><bdi>Claude<\/bdi><\/strong>/, "not like a name");
    }, { env }));

  Deno.test(`${mode} page: a registered client, named or not, is not called unknown`, () =>
    withApp(async (t) => {
      for (const metadata of [{ client_name: "Claude" }, {}]) {
        const html = await page(t, { client_id: await register(t, metadata) });
        assert.equal(textOf(html, "client-unknown"), undefined, JSON.stringify(metadata));
      }
    }, { env }));

  Deno.test(`${mode} page: the upstream's scopes in words, unknown ones by name`, () =>
    withApp(async (t) => {
      const html = await page(t);
      const scopes = textOf(html, "scopes") ?? "";
      assert.match(scopes, /Read and write access to your projects, groups and account/);
      assert.match(scopes, /Read access to your profile: username, name and public email/);
      assert.match(scopes, /Confirm who you are \(OpenID Connect\)/);
      assert.match(scopes, /\nfuture_scope/, "an unknown scope by its name, on its own line");
      assert.match(scopes, /GitLab scopes: api read_user openid future_scope/);
    }, { env: { ...env, GITLAB_SCOPES: "api read_user openid future_scope" } }));
}

Deno.test("device page: after a failed sign-in, a link back to the stored redirect_uri with error, state and iss", () =>
  withApp(async (t) => {
    const redirectUri = `${TEST_REDIRECT}?keep=1`;
    const html = await page(t, { redirect_uri: redirectUri, state: `s&"<>'` });
    const link = returnLink(html);
    assert.ok(link, "a return link");
    const url = new URL(link);
    assert.equal(`${url.origin}${url.pathname}`, TEST_REDIRECT);
    assert.deepEqual([...url.searchParams], [
      ["keep", "1"],
      ["error", "access_denied"],
      ["state", `s&"<>'`],
      ["iss", TEST_BASE],
    ]);
    assert.match(html, /<div class="failure-help" id="failure-help" hidden>/, "shown on failure");
    assert.ok(html.includes(escapeHtml(link)));
  }));

Deno.test("device page: no return link without a redirect_uri, or to one the page will not open", () =>
  withApp(async (t) => {
    for (const redirectUri of [null, "javascript:alert(1)", "blob:http://auth.test/x", "data:,x"]) {
      const html = await page(t, { redirect_uri: redirectUri, state: `st-${redirectUri}` });
      assert.equal(returnLink(html), undefined, String(redirectUri));
      assert.match(textOf(html, "failure-help") ?? "", /You can close this tab/);
    }
  }));

Deno.test("device page: no state, no state in the return link", () =>
  withApp(async (t) => {
    const link = returnLink(await page(t, { state: null }));
    assert.ok(link);
    assert.deepEqual([...new URL(link).searchParams.keys()], ["error", "iss"]);
  }));
