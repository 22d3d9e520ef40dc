/**
 * Who may sign in, re-checked on the refresh grant (issue 23 §1): at most every
 * ACCESS_RECHECK_SECONDS per session; a user no longer admitted gets invalid_grant, the session
 * ends with its GitLab token revoked and the gateway refuses the access token at once; while
 * GitLab cannot be asked the last decision stands for at most an hour, then refresh fails closed.
 */

import assert from "node:assert/strict";
import { recordsOf } from "../src/store/keys.ts";
import type { SessionRecord } from "../src/store/records.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { assertError, issueTokens, makeTestApp, refresh, type TestApp } from "./_helpers.ts";
import { echo, mcpRequest, startScripted } from "./_gateway.ts";
import { recordingLogger } from "./_access.ts";

const MINUTE = 60_000;

async function sessionOf(t: TestApp): Promise<SessionRecord | undefined> {
  const sessions = await recordsOf<SessionRecord>(t.kv, "session");
  assert.ok(sessions.length <= 1);
  return sessions[0]?.value;
}

async function refreshed(t: TestApp, refreshToken: string): Promise<string> {
  const response = await refresh(t, refreshToken);
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body.refresh_token;
}

Deno.test("access re-check: a user dropped from the group loses the session at the next due refresh", async () => {
  const mcp = startScripted(echo);
  const logger = recordingLogger();
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: mcp.url, ALLOWED_GITLAB_GROUPS: "acme:developer" },
    logger,
  });
  try {
    t.upstream.groupLevels = { acme: 30 };
    const tokens = await issueTokens(t);
    const asked = () => t.upstream.membershipsSeen.length;
    assert.equal(asked(), 1, "asked at sign-in");

    // Within ACCESS_RECHECK_SECONDS (900) GitLab is not asked again.
    t.clock.advance(14 * MINUTE);
    let current = await refreshed(t, tokens.refresh_token);
    assert.equal(asked(), 1);

    // Due: still a developer, admitted, and the decision's time is kept.
    t.clock.advance(2 * MINUTE);
    current = await refreshed(t, current);
    assert.equal(asked(), 2);
    assert.equal((await sessionOf(t))?.access?.checkedAt, t.clock.now());
    assert.ok(current);

    // Demoted to reporter: the next due refresh ends the session.
    const live = await issueTokens(t);
    const gitlabToken = "gl-access-0";
    t.upstream.groupLevels = { acme: 20 };
    t.clock.advance(16 * MINUTE);
    const before = await mcpRequest(t, live.access_token, { body: "{}" });
    await before.body?.cancel();
    assert.notEqual(before.status, 401, "the gateway accepts the token while admitted");
    await assertError(
      await refresh(t, live.refresh_token),
      400,
      "invalid_grant",
      /no longer allowed/,
    );
    assert.equal(
      (await recordsOf(t.kv, "session")).length,
      1,
      "only the other (first) session is left",
    );
    assert.ok(t.upstream.revokedTokens.includes(gitlabToken), t.upstream.revokedTokens.join());
    const after = await mcpRequest(t, live.access_token, { body: "{}" });
    await after.body?.cancel();
    assert.equal(after.status, 401, "the gateway refuses the ended session's token at once");
    const warning = logger.warnings.find((w) => /no longer allowed/.test(w.message));
    assert.ok(warning, JSON.stringify(logger.warnings));
    assert.equal(warning.fields.gitlabUser, "ada");
    assert.match(String(warning.fields.reason), /reporter, needs developer/);
  } finally {
    t.close();
    await mcp.close();
  }
});

Deno.test("access re-check: GitLab down, the last decision stands for an hour, then refresh fails closed", async () => {
  const t = await makeTestApp({ env: { ALLOWED_GITLAB_GROUPS: "acme" } });
  try {
    t.upstream.groupLevels = { acme: 10 };
    const tokens = await issueTokens(t);
    const signedInAt = t.clock.now();
    for (const failure of ["http_502", "network", "http_429"]) {
      t.upstream.membershipFailure = new UpstreamError("transient", failure);
      t.clock.advance(16 * MINUTE);
      tokens.refresh_token = await refreshed(t, tokens.refresh_token);
    }
    assert.equal((await sessionOf(t))?.access?.checkedAt, signedInAt, "nothing new was learnt");

    // An hour after the last answer, no more: invalid_grant, and the session is kept for when
    // GitLab answers again.
    t.clock.current = signedInAt + 60 * MINUTE + 1;
    await assertError(await refresh(t, tokens.refresh_token), 400, "invalid_grant", /confirm/);
    assert.ok(await sessionOf(t));
    assert.deepEqual(t.upstream.revokedTokens, []);

    t.upstream.membershipFailure = undefined;
    await refreshed(t, tokens.refresh_token);
    assert.equal((await sessionOf(t))?.access?.checkedAt, t.clock.now());
  } finally {
    t.close();
  }
});

Deno.test("access re-check: a session signed in before the lists were set is checked at its first refresh", async () => {
  const kvPath = await Deno.makeTempFile({ suffix: ".kv" });
  const open = await makeTestApp({ kvPath });
  try {
    const tokens = await issueTokens(open);
    assert.equal((await sessionOf(open))?.access, undefined);
    // The operator sets a list and restarts: the same KV, the same GitLab.
    const listed = await makeTestApp({
      kvPath,
      clock: open.clock,
      upstream: open.upstream,
      env: { ALLOWED_GITLAB_USERS: "grace" },
    });
    try {
      await assertError(await refresh(listed, tokens.refresh_token), 400, "invalid_grant");
      assert.equal(await sessionOf(listed), undefined);
      assert.deepEqual(listed.upstream.revokedTokens, ["gl-access-0"]);
    } finally {
      listed.close();
    }
  } finally {
    open.close();
    await Deno.remove(kvPath);
  }
});
