/**
 * Who may sign in, at the sign-in (issue 23 §1): a listed group admits its members (with a
 * minimum role when one is named), the user list admits too; a refused sign-in fails in the
 * device mode's poll and returns `access_denied` in the redirect mode, with the GitLab token
 * revoked and a warning logged; the session keeps the access levels a gateway policy reads.
 */

import assert from "node:assert/strict";
import { recordingLogger } from "./_access.ts";
import type { SessionRecord } from "../src/store/records.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  countRecords,
  makeTestApp,
  poll,
  redirectSignIn,
  startFlow,
  TEST_BASE,
  TEST_REDIRECT,
  type TestApp,
} from "./_helpers.ts";

async function withAccessApp(
  env: Record<string, string>,
  fn: (t: TestApp, logger: ReturnType<typeof recordingLogger>) => Promise<void>,
): Promise<void> {
  const logger = recordingLogger();
  const t = await makeTestApp({ env, logger });
  try {
    await fn(t, logger);
  } finally {
    t.close();
  }
}

/** Approves a device flow at the fake GitLab and polls once; the poll's status and body. */
async function deviceSignIn(t: TestApp) {
  const flowState = await startFlow(t);
  t.upstream.approve();
  const response = await poll(t, flowState);
  return { flowState, status: response.status, body: await response.json() };
}

/** The one session in KV, as stored. */
async function onlySession(t: TestApp): Promise<Deno.KvEntry<SessionRecord>> {
  const sessions = await recordsOf<SessionRecord>(t.kv, "session");
  assert.equal(sessions.length, 1);
  return sessions[0];
}

Deno.test("access: a member of a listed group without a role signs in; the session keeps its levels", () =>
  withAccessApp({ ALLOWED_GITLAB_GROUPS: "acme,other" }, async (t) => {
    t.upstream.groupLevels = { acme: 10 };
    const { status, body } = await deviceSignIn(t);
    assert.equal(status, 200);
    assert.equal(body.status, "complete", JSON.stringify(body));
    const { value } = await onlySession(t);
    assert.deepEqual(value.access, {
      checkedAt: t.clock.now(),
      groupLevels: { acme: 10 },
      admittingGroups: ["acme"],
      listedUser: false,
    });
    // Asked with the user's own token, for the user GitLab named, every listed group.
    assert.deepEqual(t.upstream.membershipsSeen, [
      { accessToken: "gl-access-0", groupPath: "acme", userId: 4242 },
      { accessToken: "gl-access-0", groupPath: "other", userId: 4242 },
    ]);
    assert.deepEqual(t.upstream.revokedTokens, []);
  }));

Deno.test("access: a group's role is a minimum: developer admits a maintainer, refuses a reporter", async () => {
  await withAccessApp({ ALLOWED_GITLAB_GROUPS: "acme/platform:developer" }, async (t) => {
    t.upstream.groupLevels = { "acme/platform": 40 };
    assert.equal((await deviceSignIn(t)).body.status, "complete");
  });
  await withAccessApp({ ALLOWED_GITLAB_GROUPS: "acme/platform:developer" }, async (t, logger) => {
    t.upstream.groupLevels = { "acme/platform": 20 };
    const { flowState, status, body } = await deviceSignIn(t);
    // The spec's failed poll body (§2.4), naming the account and what to do.
    assert.equal(status, 200);
    assert.deepEqual(Object.keys(body).sort(), ["error", "status"]);
    assert.equal(body.status, "failed");
    assert.match(body.error, /@ada/);
    assert.match(body.error, /not allowed/);
    assert.match(body.error, /operator/);
    // No code, no session; the flow is over; GitLab's token is revoked.
    assert.equal(await countRecords(t.kv, "session"), 0);
    assert.equal(await countRecords(t.kv, "code"), 0);
    const again = await poll(t, flowState);
    assert.equal(again.status, 400);
    assert.equal((await again.json()).status, "expired");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
    const warning = logger.warnings.find((w) => /not allowed/.test(w.message));
    assert.ok(warning, JSON.stringify(logger.warnings));
    assert.equal(warning.fields.gitlabUser, "ada");
    assert.match(String(warning.fields.reason), /acme\/platform: reporter, needs developer/);
  });
});

Deno.test("access: the user list admits without any group; either list admits", () =>
  withAccessApp({ ALLOWED_GITLAB_GROUPS: "acme", ALLOWED_GITLAB_USERS: "grace,ADA" }, async (t) => {
    const { body } = await deviceSignIn(t);
    assert.equal(body.status, "complete", JSON.stringify(body));
    const { value } = await onlySession(t);
    assert.equal(value.access?.listedUser, true);
    assert.deepEqual(value.access?.admittingGroups, []);
  }));

Deno.test("access: not on the user list and no group: refused", () =>
  withAccessApp({ ALLOWED_GITLAB_USERS: "grace" }, async (t) => {
    const { body } = await deviceSignIn(t);
    assert.equal(body.status, "failed");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-0"]);
    // The user list alone needs no membership question.
    assert.deepEqual(t.upstream.membershipsSeen, []);
  }));

Deno.test("access: GitLab unable to answer the membership question leaves the device flow pending", () =>
  withAccessApp({ ALLOWED_GITLAB_GROUPS: "acme" }, async (t) => {
    const { UpstreamError } = await import("../src/upstream/types.ts");
    t.upstream.groupLevels = { acme: 30 };
    t.upstream.membershipFailure = new UpstreamError("transient", "http_502");
    const { flowState, body } = await deviceSignIn(t);
    assert.equal(body.status, "pending");
    assert.equal(await countRecords(t.kv, "session"), 0);
    t.upstream.membershipFailure = undefined;
    const done = await (await poll(t, flowState)).json();
    assert.equal(done.status, "complete", JSON.stringify(done));
    assert.deepEqual(t.upstream.revokedTokens, []);
  }));

Deno.test("access: the redirect sign-in shows our refusal page, linking back with access_denied, state and iss", () =>
  withAccessApp(
    { GITLAB_SIGN_IN: "redirect", ALLOWED_GITLAB_GROUPS: "acme:maintainer" },
    async (t, logger) => {
      t.upstream.groupLevels = { acme: 30 };
      const response = await redirectSignIn(t);
      // Our page, not a bare 302 the client would show as its generic error; nothing moves on
      // its own.
      assert.equal(response.status, 403);
      assert.equal(response.headers.get("location"), null);
      assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
      const html = await response.text();
      assert.doesNotMatch(html, /http-equiv="refresh"|<script/i);
      assert.match(html, /Sign-in refused by this service/);
      assert.match(html, /@ada is not allowed to sign in here/);
      assert.match(html, /admits only members of certain groups/, "the reason, in words");
      assert.doesNotMatch(html, /acme/, "the listed groups are the operator's to tell");
      const href = /id="return-link" href="([^"]+)"/.exec(html)?.[1];
      assert.ok(href, html);
      const location = new URL(href.replaceAll("&amp;", "&"));
      assert.equal(`${location.origin}${location.pathname}`, TEST_REDIRECT);
      const params = Object.fromEntries(location.searchParams);
      assert.equal(params.error, "access_denied");
      assert.match(params.error_description, /@ada is not allowed/);
      assert.equal(params.state, "xyz");
      assert.equal(params.iss, TEST_BASE);
      assert.equal(params.code, undefined);
      assert.equal(await countRecords(t.kv, "session"), 0);
      assert.deepEqual(t.upstream.revokedTokens, ["gl-access-x"]);
      assert.ok(logger.warnings.some((w) => w.fields.gitlabUser === "ada"));
    },
  ));

Deno.test("access: the redirect sign-in admits a member and stores the levels", () =>
  withAccessApp(
    { GITLAB_SIGN_IN: "redirect", ALLOWED_GITLAB_GROUPS: "acme:maintainer" },
    async (t) => {
      t.upstream.groupLevels = { acme: 50 };
      const response = await redirectSignIn(t);
      const location = new URL(response.headers.get("location")!);
      assert.ok(location.searchParams.get("code"), location.href);
      assert.deepEqual((await onlySession(t)).value.access?.admittingGroups, ["acme"]);
    },
  ));

Deno.test("access: the redirect sign-in revokes GitLab's token when the membership question fails", () =>
  withAccessApp(
    { GITLAB_SIGN_IN: "redirect", ALLOWED_GITLAB_GROUPS: "acme" },
    async (t) => {
      const { UpstreamError } = await import("../src/upstream/types.ts");
      t.upstream.groupLevels = { acme: 30 };
      t.upstream.membershipFailure = new UpstreamError("transient", "http_502");
      const response = await redirectSignIn(t);
      assert.equal(response.status, 302);
      const location = new URL(response.headers.get("location")!);
      assert.equal(location.searchParams.get("error"), "temporarily_unavailable");
      assert.equal(location.searchParams.get("code"), null);
      assert.equal(await countRecords(t.kv, "session"), 0);
      // Nothing holds the token GitLab issued at the callback: no flow keeps it for a retry, as
      // the device flow's does, so it is revoked at once (docs/security.md "Redirect sign-in").
      assert.deepEqual(t.upstream.revokedTokens, ["gl-access-x"]);
    },
  ));
