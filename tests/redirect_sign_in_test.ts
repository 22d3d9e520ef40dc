/**
 * The redirect sign-in (GITLAB_SIGN_IN=redirect) against the real app and a scripted GitLab:
 * the consent page, "Continue" and "Cancel", the callback, the remembered consent, and the holes
 * an attacker probes: a consent POST without or with a wrong CSRF token or from another browser,
 * a callback without the browser's cookie, a replayed or raced callback, an expired step.
 */

import assert from "node:assert/strict";
import { sha256Base64Url } from "../src/crypto.ts";
import { recordsOf } from "../src/store/keys.ts";
import { CODE_TTL_MS } from "../src/session/life.ts";
import { sessionIdOf } from "../src/store/session_tokens.ts";
import {
  authorize,
  consentFormOf,
  CookieJar,
  countRecords,
  exchange,
  kvText,
  makeTestApp,
  PKCE,
  register,
  registerClient,
  TEST_BASE,
  TEST_REDIRECT,
  type TestApp,
  token,
  withApp,
} from "./_helpers.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { StoreUnavailableError } from "../src/store/backend.ts";
import { createTemplates } from "../src/pages/mod.ts";
import deviceHtml from "../templates/device.html" with { type: "text" };
import deviceJs from "../templates/device.js" with { type: "text" };
import homeHtml from "../templates/home.html" with { type: "text" };

const REDIRECT_MODE = { env: { GITLAB_SIGN_IN: "redirect" } };
const CALLBACK = `${TEST_BASE}/oauth/callback`;

function withRedirectApp(fn: (t: TestApp) => Promise<void>, env: Record<string, string> = {}) {
  return withApp(fn, { env: { ...REDIRECT_MODE.env, ...env } });
}

/** POST /oauth/consent as the browser holding `jar`. */
async function postConsent(
  t: TestApp,
  jar: CookieJar,
  form: Record<string, string>,
): Promise<Response> {
  const response = await t.app(
    new Request(`${TEST_BASE}/oauth/consent`, {
      method: "POST",
      headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(form),
    }),
  );
  jar.store(response);
  return response;
}

/** GET /oauth/callback with `params` as the browser holding `jar`. */
function callback(t: TestApp, jar: CookieJar, params: Record<string, string>): Promise<Response> {
  return t.app(
    new Request(`${CALLBACK}?${new URLSearchParams(params)}`, { headers: jar.headers() }),
  );
}

/** The consent page's form, after asserting the page. */
async function consentPage(t: TestApp, jar: CookieJar, overrides = {}) {
  const response = await authorize(t, overrides, { jar });
  const html = await response.text();
  assert.equal(response.status, 200, html);
  return { form: consentFormOf(html), html, response };
}

/** Through the consent page (unless remembered) to GitLab; returns GitLab's authorization URL. */
async function continueToGitLab(t: TestApp, jar: CookieJar, overrides = {}): Promise<URL> {
  const response = await authorize(t, overrides, { jar });
  if (response.status === 302) return gitlabLocation(response);
  const form = consentFormOf(await response.text());
  return gitlabLocation(await postConsent(t, jar, { ...form, action: "continue" }));
}

function gitlabLocation(response: Response): URL {
  assert.equal(response.status, 302);
  const location = new URL(response.headers.get("location") ?? "");
  assert.equal(location.origin + location.pathname, "https://gitlab.test/oauth/authorize");
  return location;
}

function clientLocation(response: Response, redirectUri = TEST_REDIRECT): URLSearchParams {
  assert.equal(response.status, 302);
  const location = new URL(response.headers.get("location") ?? "");
  assert.equal(location.origin + location.pathname, redirectUri);
  return location.searchParams;
}

async function assertRefusedPage(response: Response, text: RegExp): Promise<void> {
  const html = await response.text();
  assert.equal(response.status, 400, html);
  assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
  assert.equal(response.headers.get("location"), null);
  assert.match(html, text);
}

Deno.test("redirect mode: the consent page shows client, return address and scopes, without script", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const { html, response } = await consentPage(t, jar, { client_id: "<b>client</b>" });
    assert.match(html, /&lt;b&gt;client&lt;\/b&gt;/);
    assert.match(html, /http:\/\/127\.0\.0\.1:9999/);
    assert.match(html, /<code>api<\/code>/);
    assert.match(html, /Continue with GitLab/);
    assert.match(html, />Cancel</);
    assert.doesNotMatch(html, /<script/i);
    const csp = response.headers.get("content-security-policy") ?? "";
    assert.doesNotMatch(csp, /script-src/);
    assert.match(csp, /default-src 'none'/);
    // GitLab's own origin, and any of its scheme: GitLab may pass the browser on to a single
    // sign-on provider, and Chromium holds every redirect after "Continue" to form-action.
    assert.match(
      csp,
      /form-action http:\/\/auth\.test https:\/\/gitlab\.com https: http:\/\/127\.0\.0\.1:9999/,
    );
    assert.equal(response.headers.get("cache-control"), "no-store");
    const [browserCookie] = response.headers.getSetCookie();
    assert.match(browserCookie, /^mcp-auth-browser=[\w-]{43}; Path=\/; HttpOnly; SameSite=Lax$/);
    assert.equal(t.upstream.calls.start, 0, "no device flow in redirect mode");
  });
});

Deno.test("redirect mode: a registered client's name is shown as given, not verified", async () => {
  await withRedirectApp(async (t) => {
    const registered = await register(t, {
      redirect_uris: [TEST_REDIRECT],
      client_name: "Friendly <Client>",
    });
    const { client_id } = await registered.json();
    const { html } = await consentPage(t, new CookieJar(), { client_id });
    assert.match(html, /Friendly &lt;Client&gt;/);
    assert.match(html, /not verified/);
  });
});

Deno.test("redirect mode: Continue → GitLab with our client, callback, state and PKCE; callback → client with code, state, iss; code → tokens", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const gitlab = await continueToGitLab(t, jar);
    const params = gitlab.searchParams;
    assert.equal(params.get("client_id"), "gitlab-app-id");
    assert.equal(params.get("redirect_uri"), CALLBACK);
    assert.equal(params.get("response_type"), "code");
    assert.equal(params.get("code_challenge_method"), "S256");
    const state = params.get("state") ?? "";
    assert.match(state, /^[\w-]{43}$/);
    assert.ok(jar.cookies.size === 2, "the browser binding and the consent");

    const back = await callback(t, jar, { code: "gl-code", state });
    const landed = clientLocation(back);
    assert.deepEqual([...landed.keys()], ["code", "state", "iss"]);
    assert.equal(landed.get("state"), "xyz");
    assert.equal(landed.get("iss"), TEST_BASE);

    const [grant] = t.upstream.exchangesSeen;
    assert.equal(grant.code, "gl-code");
    assert.equal(grant.redirectUri, CALLBACK);
    assert.equal(sha256Base64Url(grant.codeVerifier), params.get("code_challenge"));
    assert.ok(!(await kvText(t.kv)).includes(grant.codeVerifier), "the verifier is sealed at rest");

    const tokens = await exchange(t, landed.get("code") ?? "");
    assert.equal(tokens.status, 200, await tokens.clone().text());
    assert.equal((await tokens.json()).token_type, "Bearer");
    assert.equal(await countRecords(t.kv, "signin"), 0, "no step is left behind");
  });
});

Deno.test("redirect mode: a sole registered redirect URI /authorize was not given need not be named at /token", async () => {
  await withRedirectApp(async (t) => {
    const clientId = await registerClient(t, ["https://app.example/cb"]);
    const jar = new CookieJar();
    const gitlab = await continueToGitLab(t, jar, { client_id: clientId, redirect_uri: null });
    const state = gitlab.searchParams.get("state") ?? "";
    const back = await callback(t, jar, { code: "gl-code", state });
    const code = clientLocation(back, "https://app.example/cb").get("code") ?? "";
    // Spec: redirect_uri at /token is "required only if one was given to /authorize".
    const tokens = await token(t, {
      grant_type: "authorization_code",
      code,
      code_verifier: PKCE.verifier,
      client_id: clientId,
    });
    assert.equal(tokens.status, 200, await tokens.clone().text());
    await tokens.body?.cancel();
  }, { REDIRECT_URI_POLICY: "registered" });
});

Deno.test("redirect mode: an unredeemed code leaves no session behind; the next callback revokes its GitLab token", async () => {
  await withRedirectApp(async (t) => {
    const signIn = async (gitlabToken: string) => {
      const jar = new CookieJar();
      const state = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
      t.upstream.exchanges.push({ accessToken: gitlabToken, refreshToken: `${gitlabToken}-r` });
      return clientLocation(await callback(t, jar, { code: "gl-code", state })).get("code") ?? "";
    };
    const abandoned = await signIn("gl-abandoned");
    t.clock.advance(CODE_TTL_MS + 1);
    assert.equal(await t.store.getSession(sessionIdOf(abandoned) ?? ""), null);
    await signIn("gl-next");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-abandoned"]);
    assert.equal(await countRecords(t.kv, "session"), 1, "only the new sign-in's");
  });
});

Deno.test("redirect mode: the consent is remembered per browser, client and return address", async (s) => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    await continueToGitLab(t, jar);
    const consent = [...jar.cookies.keys()].find((name) => name.includes("consent")) ?? "";
    assert.ok(consent);

    await s.step("same client and address: straight to GitLab", async () => {
      gitlabLocation(await authorize(t, {}, { jar }));
    });
    await s.step("a loopback port may differ (RFC 8252)", async () => {
      gitlabLocation(
        await authorize(t, { redirect_uri: "http://127.0.0.1:4321/callback" }, { jar }),
      );
    });
    await s.step("another client: the consent page", async () => {
      assert.equal((await authorize(t, { client_id: "client-2" }, { jar })).status, 200);
    });
    await s.step("the same client id returning elsewhere: the consent page", async () => {
      const elsewhere = await authorize(t, { redirect_uri: "https://evil.example/cb" }, { jar });
      assert.equal(elsewhere.status, 200);
    });
    await s.step("another browser: the consent page", async () => {
      assert.equal((await authorize(t, {}, { jar: new CookieJar() })).status, 200);
    });
    await s.step("an altered consent cookie: the consent page", async () => {
      const forged = new CookieJar();
      const value = jar.cookies.get(consent) ?? "";
      forged.cookies.set(consent, value.replace(/^\d+/, "99999999999"));
      assert.equal((await authorize(t, {}, { jar: forged })).status, 200);
    });
    await s.step("after 30 days: the consent page", async () => {
      t.clock.advance(30 * 86_400_000 + 1000);
      assert.equal((await authorize(t, {}, { jar })).status, 200);
    });
  });
});

Deno.test("redirect mode: cookies are __Host- prefixed and Secure under an https base URL", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const { form, response: page } = await consentPage(t, jar);
    assert.match(page.headers.getSetCookie()[0], /^__Host-mcp-auth-browser=.*; Secure$/);
    const response = await t.app(
      new Request("https://auth.example/oauth/consent", {
        method: "POST",
        headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ ...form, action: "continue" }),
      }),
    );
    const [consent] = response.headers.getSetCookie();
    assert.match(
      consent,
      /^__Host-mcp-auth-consent-[\w-]+=\d+\.[\w-]+; Path=\/; HttpOnly; SameSite=Lax; Secure; Max-Age=2592000$/,
    );
  }, { BASE_URL: "https://auth.example" });
});

Deno.test("redirect mode: Cancel → client with access_denied, state and iss; the step is spent", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const { form } = await consentPage(t, jar);
    const landed = clientLocation(await postConsent(t, jar, { ...form, action: "cancel" }));
    assert.deepEqual(Object.fromEntries(landed), {
      error: "access_denied",
      state: "xyz",
      iss: TEST_BASE,
    });
    assert.equal(jar.cookies.size, 1, "no consent remembered");
    await assertRefusedPage(await postConsent(t, jar, { ...form, action: "continue" }), /expired/);
  });
});

Deno.test("redirect mode: GitLab's access_denied → client with access_denied, state and iss", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const state = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    const landed = clientLocation(
      await callback(t, jar, { error: "access_denied", error_description: "no", state }),
    );
    assert.deepEqual(Object.fromEntries(landed), {
      error: "access_denied",
      state: "xyz",
      iss: TEST_BASE,
    });
    assert.equal(t.upstream.calls.exchange, 0);
  });
});

Deno.test("redirect mode: a consent POST without or with a wrong CSRF token, or from another browser, is refused", async (s) => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const { form } = await consentPage(t, jar);
    await s.step("without the token", async () => {
      const response = await postConsent(t, jar, { sign_in: form.sign_in, action: "continue" });
      await assertRefusedPage(response, /cross-site request forgery/);
    });
    await s.step("with a wrong token", async () => {
      const response = await postConsent(t, jar, {
        ...form,
        csrf_token: form.csrf_token.replace(/^./, (c) => c === "A" ? "B" : "A"),
        action: "continue",
      });
      await assertRefusedPage(response, /cross-site request forgery/);
    });
    await s.step("with the token, from a browser without the cookie", async () => {
      const response = await postConsent(t, new CookieJar(), { ...form, action: "continue" });
      await assertRefusedPage(response, /not started in this browser/);
    });
    await s.step("with the token but neither Continue nor Cancel", async () => {
      await assertRefusedPage(await postConsent(t, jar, form), /Choose Continue with GitLab/);
    });
    await s.step("none of these spent the step: the right browser continues", async () => {
      gitlabLocation(await postConsent(t, jar, { ...form, action: "continue" }));
    });
    await s.step("a JSON body is no form: 400 invalid_request", async () => {
      const response = await t.app(
        new Request(`${TEST_BASE}/oauth/consent`, {
          method: "POST",
          headers: { ...jar.headers(), "Content-Type": "text/plain" },
          body: "x",
        }),
      );
      assert.equal(response.status, 400);
      assert.equal((await response.json()).error, "invalid_request");
    });
  });
});

Deno.test("redirect mode: a callback without the browser's cookie is refused and leaves the step usable", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const state = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    await assertRefusedPage(
      await callback(t, new CookieJar(), { code: "gl-code", state }),
      /not started in this browser/,
    );
    const stranger = new CookieJar();
    await authorize(t, {}, { jar: stranger }); // a browser binding of its own
    await assertRefusedPage(
      await callback(t, stranger, { code: "gl-code", state }),
      /not started in this browser/,
    );
    assert.equal(t.upstream.calls.exchange, 0, "GitLab's code is never exchanged for them");
    clientLocation(await callback(t, jar, { code: "gl-code", state }));
  });
});

Deno.test("redirect mode: a replayed callback gets the 400 page; parallel callbacks complete once", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const state = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    clientLocation(await callback(t, jar, { code: "gl-code", state }));
    await assertRefusedPage(await callback(t, jar, { code: "gl-code", state }), /already used/);
    assert.equal(t.upstream.calls.exchange, 1);

    const racing = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => callback(t, jar, { code: "gl-code-2", state: racing })),
    );
    const statuses = answers.map((answer) => answer.status).sort();
    await Promise.all(answers.map((answer) => answer.body?.cancel()));
    assert.deepEqual(statuses, [302, 400, 400, 400, 400, 400, 400, 400]);
    assert.equal(t.upstream.calls.exchange, 2);
    assert.equal(await countRecords(t.kv, "session"), 2);
  });
});

Deno.test("redirect mode: parallel consent posts of one page (Continue and Cancel) → one answer acts, the rest get the 400 page", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const { form } = await consentPage(t, jar);
    const actions = ["continue", "cancel", "continue", "cancel", "continue", "continue"];
    const answers = await Promise.all(
      actions.map((action) => postConsent(t, jar, { ...form, action })),
    );
    const statuses = answers.map((answer) => answer.status).sort();
    await Promise.all(answers.map((answer) => answer.body?.cancel()));
    assert.deepEqual(statuses, [302, 400, 400, 400, 400, 400]);
    // The consent step is gone; at most the one GitLab step a winning Continue stored remains.
    assert.ok(await countRecords(t.kv, "signin") <= 1);
  });
});

Deno.test("redirect mode: steps live 10 minutes", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const { form } = await consentPage(t, jar);
    t.clock.advance(10 * 60_000 + 1);
    await assertRefusedPage(await postConsent(t, jar, { ...form, action: "continue" }), /expired/);

    const state = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    t.clock.advance(10 * 60_000 + 1);
    await assertRefusedPage(await callback(t, jar, { code: "c", state }), /expired/);
    assert.equal(t.upstream.calls.exchange, 0);
  });
});

Deno.test("redirect mode: GitLab failing the exchange → client with an error; nothing half-written", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    t.upstream.exchanges.push(new UpstreamError("transient", "http_502"));
    const state = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    const landed = clientLocation(await callback(t, jar, { code: "c", state }));
    assert.equal(landed.get("error"), "temporarily_unavailable");

    t.upstream.exchanges.push(new UpstreamError("terminal", "invalid_grant"));
    const again = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    assert.equal(
      clientLocation(await callback(t, jar, { code: "c", state: again })).get("error"),
      "server_error",
    );
    assert.deepEqual(
      (await recordsOf(t.kv)).map((entry) => entry.key[0]).filter((kind) => kind !== "rate"),
      [],
    );
  });
});

Deno.test("redirect mode: a store that fails the callback's commit leaves GitLab's token revoked", async () => {
  await withRedirectApp(async (t) => {
    const jar = new CookieJar();
    const state = (await continueToGitLab(t, jar)).searchParams.get("state") ?? "";
    t.store.completeSignIn = () => Promise.reject(new StoreUnavailableError("database down"));
    const response = await callback(t, jar, { code: "c", state });
    assert.equal(response.status, 503, await response.text());
    assert.equal(await countRecords(t.kv, "session"), 0);
    // No record holds the token GitLab just issued: nothing would ever use or revoke it.
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-x"]);
  });
});

Deno.test("redirect mode: no redirect_uri or a javascript: one gets a page, never a redirect", async () => {
  await withRedirectApp(async (t) => {
    for (const redirect_uri of [null, "javascript:alert(1)"]) {
      const response = await authorize(t, { redirect_uri }, { jar: new CookieJar() });
      await assertRefusedPage(response, /no address to return to/);
    }
  });
});

Deno.test("device mode (the default): the redirect sign-in's routes do not exist", async () => {
  const t = await makeTestApp();
  try {
    const response = await t.app(new Request(`${CALLBACK}?code=a&state=b`));
    assert.equal(response.status, 404);
    await response.body?.cancel();
  } finally {
    t.close();
  }
});

Deno.test("redirect mode: an app's return address is named as an app, and the page's forms may lead there", async () => {
  await withRedirectApp(async (t) => {
    const { html, response } = await consentPage(t, new CookieJar(), {
      redirect_uri: "cursor://anysphere.cursor-retrieval/oauth/callback",
    });
    assert.match(html, /an app on this device \(cursor:\/\/\)/);
    assert.match(
      response.headers.get("content-security-policy") ?? "",
      /form-action [^;]* cursor:;/,
    );
  });
});

Deno.test("the sign-in template is checked at load", () => {
  const base = { deviceHtml, deviceJs, homeHtml };
  const page = (body: string) => `<style nonce="{{nonce}}"></style>${body}`;
  const all = "{{title}}{{message}}{{clientId}}{{clientName}}{{verifiedHost}}{{unverifiedName}}" +
    "{{returnHost}}{{scopes}}" +
    "{{signInId}}{{csrfToken}}{{actionUrl}}";
  assert.ok(createTemplates({ ...base, signInHtml: page(all) }));
  assert.throws(
    () => createTemplates({ ...base, signInHtml: page(all.replace("{{csrfToken}}", "")) }),
    /missing placeholder for "csrfToken"/,
  );
  assert.throws(
    () => createTemplates({ ...base, signInHtml: page(`${all}{{{title}}}`) }),
    /not a raw placeholder/,
  );
  assert.throws(
    () => createTemplates({ ...base, signInHtml: `<style></style>${all}{{nonce}}` }),
    /lacks the nonce/,
  );
});
