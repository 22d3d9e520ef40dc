/**
 * The user's sign-in at `/device` through GitLab, in both sign-in modes (GITLAB_SIGN_IN=redirect
 * and GitLab's own device flow), over real HTTP against the real app and the fake GitLab: "Continue" goes to GitLab, the
 * callback asks Approve / Deny (a form with a CSRF token bound to the browser), and the client's
 * poll then gets tokens, or `access_denied` (Deny on our page or at GitLab, or a user the
 * allow-lists refuse).
 */

import assert from "node:assert/strict";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { StoreUnavailableError } from "../src/store/backend.ts";
import {
  assertError,
  CookieJar,
  countRecords,
  flowDataFromPage,
  poll as pollFlow,
  TEST_BASE,
  type TestApp,
  token,
  withApp,
} from "./_helpers.ts";

const REDIRECT = { GITLAB_SIGN_IN: "redirect", GITLAB_CLIENT_SECRET: "gitlab-secret" };

interface Started {
  clientId: string;
  deviceCode: string;
  userCode: string;
}

async function start(t: TestApp): Promise<Started> {
  const registered = await t.app(
    new Request(`${TEST_BASE}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_name: "agent", grant_types: [DEVICE_CODE_GRANT_TYPE] }),
    }),
  );
  const clientId = (await registered.json()).client_id;
  const response = await t.app(
    new Request(`${TEST_BASE}/device_authorization`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ client_id: clientId }),
    }),
  );
  const body = await response.json();
  return { clientId, deviceCode: body.device_code, userCode: body.user_code };
}

function poll(t: TestApp, started: Started): Promise<Response> {
  t.clock.advance(60_000);
  return token(t, {
    grant_type: DEVICE_CODE_GRANT_TYPE,
    device_code: started.deviceCode,
    client_id: started.clientId,
  });
}

function formOf(html: string): { device: string; csrf_token: string } {
  const device = html.match(/name="device" value="([^"]+)"/)?.[1];
  const csrf = html.match(/name="csrf_token" value="([^"]+)"/)?.[1];
  assert.ok(device && csrf, html);
  return { device, csrf_token: csrf };
}

function post(t: TestApp, jar: CookieJar, form: Record<string, string>): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/device`, {
      method: "POST",
      headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(form),
    }),
  );
}

/** Enters the code, continues to GitLab, comes back signed in: the Approve / Deny page. */
async function signIn(t: TestApp, started: Started, jar: CookieJar): Promise<string> {
  const entered = await t.app(
    new Request(`${TEST_BASE}/device?user_code=${started.userCode}`, { headers: jar.headers() }),
  );
  jar.store(entered);
  const html = await entered.text();
  assert.equal(entered.status, 200, html);
  assert.match(html, /id="device-warning"/);
  assert.doesNotMatch(html, /value="approve"/, "no Approve before the GitLab sign-in");
  const form = formOf(html);
  // Approve before signing in is no approval.
  const early = await post(t, jar, { ...form, action: "approve" });
  assert.equal(early.status, 400);
  await early.body?.cancel();
  const toGitLab = await post(t, jar, { ...form, action: "continue" });
  assert.equal(toGitLab.status, 302, await toGitLab.clone().text());
  const location = new URL(toGitLab.headers.get("location") ?? "");
  assert.equal(location.origin + location.pathname, "https://gitlab.test/oauth/authorize");
  const state = location.searchParams.get("state") ?? "";
  const back = await t.app(
    new Request(`${TEST_BASE}/oauth/callback?code=gitlab-code&state=${state}`, {
      headers: jar.headers(),
    }),
  );
  const page = await back.text();
  assert.equal(back.status, 200, page);
  return page;
}

/** Redirect mode, a fresh browser: enters the code, continues, and GitLab answers `answer`. */
async function backFromGitLab(t: TestApp, started: Started, answer: string): Promise<Response> {
  const jar = new CookieJar();
  const entered = await t.app(new Request(`${TEST_BASE}/device?user_code=${started.userCode}`));
  jar.store(entered);
  const toGitLab = await post(t, jar, { ...formOf(await entered.text()), action: "continue" });
  const state = new URL(toGitLab.headers.get("location") ?? "").searchParams.get("state");
  return await t.app(
    new Request(`${TEST_BASE}/oauth/callback?${answer}&state=${state}`, {
      headers: jar.headers(),
    }),
  );
}

Deno.test("device sign-in (redirect mode): Continue, GitLab, Approve; the client's poll gets tokens once", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    await assertError(await poll(t, started), 400, "authorization_pending");
    const jar = new CookieJar();
    const page = await signIn(t, started, jar);
    assert.match(page, /Signed in to GitLab as <strong><bdi>@ada<\/bdi><\/strong>/);
    assert.match(page, /value="approve">Approve</);
    assert.match(page, /value="deny">Deny</);
    await assertError(await poll(t, started), 400, "authorization_pending");
    const form = formOf(page);
    // Without the CSRF token, or from another browser: refused.
    const forged = await post(t, jar, { device: form.device, action: "approve" });
    assert.equal(forged.status, 400);
    await forged.body?.cancel();
    const elsewhere = await post(t, new CookieJar(), { ...form, action: "approve" });
    assert.equal(elsewhere.status, 400);
    await elsewhere.body?.cancel();
    await assertError(await poll(t, started), 400, "authorization_pending");

    const approved = await post(t, jar, { ...form, action: "approve" });
    const done = await approved.text();
    assert.equal(approved.status, 200, done);
    assert.match(done, /You may return to your device/);
    const issued = await poll(t, started);
    const body = await issued.json();
    assert.equal(issued.status, 200, JSON.stringify(body));
    assert.ok(body.access_token && body.refresh_token);
    await assertError(await poll(t, started), 400, "invalid_grant");
  }, { env: REDIRECT });
});

Deno.test("device sign-in (redirect mode): Deny answers the client's poll access_denied", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const jar = new CookieJar();
    const page = await signIn(t, started, jar);
    const denied = await post(t, jar, { ...formOf(page), action: "deny" });
    assert.equal(denied.status, 200);
    assert.match(await denied.text(), /not signed in/);
    // The user's no ends the sign-in at once: GitLab's token is revoked and its session gone,
    // not left for a sweep that only some later sign-in runs.
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-x"]);
    assert.equal(await countRecords(t.kv, "session"), 0);
    assert.equal(await countRecords(t.kv, "unredeemed"), 0);
    await assertError(await poll(t, started), 400, "access_denied");
  }, { env: REDIRECT });
});

Deno.test("device sign-in: Continue counts in the poll bucket, as the consent form does; past it, 429 and no new sign-in", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const jar = new CookieJar();
    const entered = await t.app(
      new Request(`${TEST_BASE}/device?user_code=${started.userCode}`, { headers: jar.headers() }),
    );
    jar.store(entered);
    const form = formOf(await entered.text());
    for (let i = 0; i < 2; i++) {
      const toGitLab = await post(t, jar, { ...form, action: "continue" });
      assert.equal(toGitLab.status, 302);
      await toGitLab.body?.cancel();
    }
    const signIns = await countRecords(t.kv, "signin");
    await assertError(
      await post(t, jar, { ...form, action: "continue" }),
      429,
      "temporarily_unavailable",
    );
    assert.equal(await countRecords(t.kv, "signin"), signIns, "nothing stored past the limit");
  }, { env: { ...REDIRECT, RATE_LIMIT_POLL: "2/60", RATE_LIMIT_LOOPBACK: "limit" } });
});

Deno.test("device sign-in (redirect mode): a user the allow-lists refuse reads why; the device gets access_denied", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const back = await backFromGitLab(t, started, "code=gitlab-code");
    const html = await back.text();
    assert.equal(back.status, 403, html);
    assert.match(html, /@ada is not allowed to sign in here/);
    assert.doesNotMatch(html, /value="approve"/);
    await assertError(await poll(t, started), 400, "access_denied");
  }, { env: { ...REDIRECT, ALLOWED_GITLAB_USERS: "grace" } });
});

Deno.test("device sign-in (redirect mode): GitLab failing the membership question revokes the token it issued", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    t.upstream.membershipFailure = new UpstreamError("transient", "http_502");
    const back = await backFromGitLab(t, started, "code=gitlab-code");
    await back.body?.cancel();
    assert.equal(await countRecords(t.kv, "session"), 0);
    // The callback's exchange is the only holder of this token: it is revoked, not left live.
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-x"]);
    await assertError(await poll(t, started), 400, "authorization_pending");
  }, { env: { ...REDIRECT, ALLOWED_GITLAB_GROUPS: "acme" } });
});

/** Device mode: enters the code and continues: GitLab's device flow page; its flow state. */
async function continueToDeviceFlow(t: TestApp, started: Started, jar: CookieJar) {
  const entered = await t.app(
    new Request(`${TEST_BASE}/device?user_code=${started.userCode}`, { headers: jar.headers() }),
  );
  jar.store(entered);
  const form = formOf(await entered.text());
  const page = await post(t, jar, { ...form, action: "continue" });
  const html = await page.text();
  assert.equal(page.status, 200, html);
  assert.match(html, /WDJB-MJHT/, "GitLab's user code on the device flow page");
  return flowDataFromPage(html).flowState;
}

Deno.test("device sign-in (GitLab device flow): its page returns to /device, which asks Approve / Deny", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const jar = new CookieJar();
    const flowState = await continueToDeviceFlow(t, started, jar);
    await assertError(await poll(t, started), 400, "authorization_pending");
    t.upstream.approve();
    const done = await (await pollFlow(t, flowState)).json();
    assert.equal(done.status, "complete", JSON.stringify(done));
    assert.equal(done.redirect_uri, `${TEST_BASE}/device`);
    await assertError(await poll(t, started), 400, "authorization_pending");
    // Where the page sends the browser: /device?code=…&iss=…
    const back = `${TEST_BASE}/device?code=${encodeURIComponent(done.code)}&iss=${TEST_BASE}`;
    const other = await t.app(new Request(back));
    assert.equal(other.status, 409, "another browser");
    await other.body?.cancel();
    const asked = await t.app(new Request(back, { headers: jar.headers() }));
    const page = await asked.text();
    assert.equal(asked.status, 200, page);
    assert.match(page, /Signed in to GitLab as <strong><bdi>@ada<\/bdi><\/strong>/);
    const approved = await post(t, jar, { ...formOf(page), action: "approve" });
    assert.equal(approved.status, 200);
    await approved.body?.cancel();
    const issued = await poll(t, started);
    assert.equal(issued.status, 200, await issued.clone().text());
    assert.ok((await issued.json()).access_token);
  });
});

Deno.test("device sign-in (GitLab device flow): a refused user's device gets access_denied", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const flowState = await continueToDeviceFlow(t, started, new CookieJar());
    t.upstream.approve();
    const done = await (await pollFlow(t, flowState)).json();
    assert.equal(done.status, "failed", JSON.stringify(done));
    assert.match(done.error, /@ada is not allowed to sign in here/);
    await assertError(await poll(t, started), 400, "access_denied");
  }, { env: { ALLOWED_GITLAB_USERS: "grace" } });
});

Deno.test("device sign-in: Deny at GitLab answers the device access_denied, in both modes", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const back = await backFromGitLab(t, started, "error=access_denied");
    await back.body?.cancel();
    await assertError(await poll(t, started), 400, "access_denied");
  }, { env: REDIRECT });

  await withApp(async (t) => {
    const started = await start(t);
    const flowState = await continueToDeviceFlow(t, started, new CookieJar());
    t.upstream.polls.push(new UpstreamError("terminal", "access_denied", "denied"));
    const done = await (await pollFlow(t, flowState)).json();
    assert.equal(done.status, "failed", JSON.stringify(done));
    await assertError(await poll(t, started), 400, "access_denied");
  });
});

Deno.test("device sign-in: approved and denied are logged once each, with the client, and counted", async () => {
  const lines: { message: string; fields?: Record<string, unknown> }[] = [];
  const logger = {
    info: (message: string, fields?: Record<string, unknown>) => lines.push({ message, fields }),
    warn() {},
    error() {},
  };
  const metricsToken = "metrics-token-that-is-at-least-32-bytes!";
  await withApp(async (t) => {
    const approving = await start(t);
    const jar = new CookieJar();
    const page = await signIn(t, approving, jar);
    await (await post(t, jar, { ...formOf(page), action: "approve" })).body?.cancel();
    const denying = await start(t);
    const other = new CookieJar();
    const second = await signIn(t, denying, other);
    await (await post(t, other, { ...formOf(second), action: "deny" })).body?.cancel();
    const audited = lines.filter((line) => line.fields?.deviceAuthorization !== undefined)
      .map((line) => [line.fields?.deviceAuthorization, line.fields?.clientId]);
    assert.deepEqual(audited, [
      ["started", approving.clientId],
      ["approved", approving.clientId],
      ["started", denying.clientId],
      ["denied", denying.clientId],
    ]);
    const metrics = await (await t.app(
      new Request(`${TEST_BASE}/metrics`, { headers: { Authorization: `Bearer ${metricsToken}` } }),
    )).text();
    for (const [outcome, count] of [["started", 2], ["approved", 1], ["denied", 1]]) {
      assert.match(
        metrics,
        new RegExp(
          `^gitlab_mcp_auth_device_authorizations_total\\{outcome="${outcome}"\\} ${count}$`,
          "m",
        ),
      );
    }
  }, { logger, env: { ...REDIRECT, METRICS_TOKEN: metricsToken } });
});

Deno.test("device sign-in: approved late in a long DEVICE_CODE_TTL, the session is still there to redeem", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const jar = new CookieJar();
    const page = await signIn(t, started, jar);
    t.clock.advance(30 * 60_000);
    await (await post(t, jar, { ...formOf(page), action: "approve" })).body?.cancel();
    const issued = await poll(t, started);
    assert.equal(issued.status, 200, await issued.text());
  }, { env: { ...REDIRECT, DEVICE_CODE_TTL: "3600" } });
});

/** Follows where the sign-in sent the browser back to /device: the page it shows. */
async function landing(t: TestApp, url: string, jar = new CookieJar()): Promise<string> {
  assert.equal(new URL(url).pathname, "/device", url);
  const response = await t.app(new Request(url, { headers: jar.headers() }));
  const html = await response.text();
  assert.equal(response.status, 200, html);
  assert.match(html, /name="user_code"/, "the code-entry form, to try again");
  return html;
}

function messageOf(html: string): string {
  return html.match(/<p id="message" role="alert">([^<]*)<\/p>/)?.[1] ?? "(no message)";
}

Deno.test("device sign-in (redirect mode): back from a failed GitLab sign-in, /device says what happened", async () => {
  await withApp(async (t) => {
    const denied = await start(t);
    const back = await backFromGitLab(t, denied, "error=access_denied");
    assert.equal(back.status, 302);
    assert.equal(
      messageOf(await landing(t, back.headers.get("location") ?? "")),
      "GitLab sign-in was cancelled — the device was not authorized.",
    );
    await assertError(await poll(t, denied), 400, "access_denied");

    const failed = await start(t);
    const broken = await backFromGitLab(t, failed, "error=invalid_scope");
    assert.equal(
      messageOf(await landing(t, broken.headers.get("location") ?? "")),
      "GitLab sign-in failed: server_error. To try again, enter the code from your device.",
    );
    await assertError(await poll(t, failed), 400, "authorization_pending");
  }, { env: REDIRECT });
});

Deno.test("device sign-in: /device never shows the query's own text as the failure", async () => {
  await withApp(async (t) => {
    for (const error of ["<script>alert(1)</script>", "call_555_0100_to_unlock", ""]) {
      const html = await landing(t, `${TEST_BASE}/device?error=${encodeURIComponent(error)}`);
      assert.equal(
        messageOf(html),
        "GitLab sign-in failed. To try again, enter the code from your device.",
      );
      assert.doesNotMatch(html, /alert\(1\)|call_555/);
    }
  });
});

/** Device mode: enters the code, continues, GitLab's flow answers `answer`; the page's link back. */
async function failedDeviceFlow(
  t: TestApp,
  started: Started,
  jar: CookieJar,
  answer: () => void,
): Promise<string> {
  const entered = await t.app(
    new Request(`${TEST_BASE}/device?user_code=${started.userCode}`, { headers: jar.headers() }),
  );
  jar.store(entered);
  const form = formOf(await entered.text());
  const page = await (await post(t, jar, { ...form, action: "continue" })).text();
  answer();
  const done = await (await pollFlow(t, flowDataFromPage(page).flowState)).json();
  assert.equal(done.status, "failed", JSON.stringify(done));
  const link = page.match(/id="return-link" href="([^"]+)"/)?.[1]?.replaceAll("&amp;", "&");
  assert.ok(link, "the page's link back after a failure");
  return link;
}

Deno.test("device sign-in (GitLab device flow): the page's link back after a failure says what happened", async () => {
  await withApp(async (t) => {
    const denied = await start(t);
    const jar = new CookieJar();
    const link = await failedDeviceFlow(t, denied, jar, () => {
      t.upstream.polls.push(new UpstreamError("terminal", "access_denied", "denied"));
    });
    assert.equal(
      messageOf(await landing(t, link, jar)),
      "GitLab sign-in was cancelled, or this service refused the account — the device was not authorized.",
    );
    await assertError(await poll(t, denied), 400, "access_denied");
    // Another browser, or a guess of the code's hash, reads nothing of it: a wrong code.
    const other = await t.app(new Request(link));
    assert.equal(other.status, 400);
    assert.doesNotMatch(await other.text(), /GitLab sign-in/);

    const expired = await start(t);
    const other2 = new CookieJar();
    const back = await failedDeviceFlow(t, expired, other2, () => {
      t.upstream.polls.push(new UpstreamError("terminal", "expired_token", "expired"));
    });
    assert.equal(
      messageOf(await landing(t, back, other2)),
      "GitLab sign-in did not complete. To try again, enter the code from your device.",
    );
    await assertError(await poll(t, expired), 400, "authorization_pending");
  });
});

Deno.test("device sign-in (GitLab device flow): a refused account's link back says it was refused", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const jar = new CookieJar();
    const link = await failedDeviceFlow(t, started, jar, () => t.upstream.approve());
    assert.match(messageOf(await landing(t, link, jar)), /this service refused the account/);
    await assertError(await poll(t, started), 400, "access_denied");
  }, { env: { ALLOWED_GITLAB_USERS: "grace" } });
});

Deno.test("device sign-in (redirect mode): a store that fails to keep the sign-in leaves GitLab's token revoked", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    t.store.approveDeviceAuthorization = () => Promise.reject(new StoreUnavailableError("down"));
    const back = await backFromGitLab(t, started, "code=gitlab-code");
    assert.equal(back.status, 503, await back.text());
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-x"]);
  }, { env: REDIRECT });
});

Deno.test("device sign-in (GitLab device flow): a device code gone before GitLab approves leaves no flow behind", async () => {
  await withApp(async (t) => {
    const started = await start(t);
    const flowState = await continueToDeviceFlow(t, started, new CookieJar());
    t.clock.advance(61_000); // the device code's 60 s are over; GitLab's flow still lives
    t.upstream.approve({ accessToken: "gl-too-late" });
    const late = await pollFlow(t, flowState);
    assert.equal(late.status, 400);
    assert.deepEqual(await late.json(), { status: "expired", error: "Device code expired" });
    assert.deepEqual(t.upstream.revokedTokens, ["gl-too-late"]);
    // The flow ended with the answer: nothing of it stays to be counted, polled or swept again.
    assert.equal(await countRecords(t.kv, "flow"), 0);
    assert.equal(await countRecords(t.kv, "stranded"), 0);
  }, { env: { DEVICE_CODE_TTL: "60" } });
});
