/**
 * Who may sign in, re-checked on the refresh grant (issue 23 §1) and at the gateway (issue 33
 * §1.7): once a session's decision is older than ACCESS_RECHECK_SECONDS; a user no longer
 * admitted gets invalid_grant (refresh) or 401 (gateway), the session ends with its GitLab token
 * revoked; while GitLab cannot be asked the last decision stands for
 * ACCESS_RECHECK_GRACE_SECONDS (an hour; strict: none), then both answer 503 and keep the session.
 */

import assert from "node:assert/strict";
import { recordsOf } from "../src/store/keys.ts";
import type { SessionRecord } from "../src/store/records.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  assertError,
  issueTokens,
  makeTestApp,
  refresh,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { loadConfig } from "../src/app/config.ts";
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
    env: {
      MCP_UPSTREAM_URL: mcp.url,
      ALLOWED_GITLAB_GROUPS: "acme:developer",
      ACCESS_RECHECK_SECONDS: "900",
    },
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
    const before = await mcpRequest(t, live.access_token, { body: "{}" });
    await before.body?.cancel();
    assert.notEqual(before.status, 401, "the gateway accepts the token while admitted");
    t.upstream.groupLevels = { acme: 20 };
    t.clock.advance(16 * MINUTE);
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

Deno.test("access re-check: GitLab down, the last decision stands for the grace, then refresh answers 503", async () => {
  const t = await makeTestApp({
    env: { ALLOWED_GITLAB_GROUPS: "acme", ACCESS_RECHECK_SECONDS: "900" },
  });
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

    // ACCESS_RECHECK_GRACE_SECONDS (3600) after the decision fell due (15 minutes), no more: 503
    // temporarily_unavailable (not invalid_grant, which makes a client drop its session), and
    // the session is kept for when GitLab answers again.
    t.clock.current = signedInAt + 15 * MINUTE + 60 * MINUTE + 1;
    const refused = await refresh(t, tokens.refresh_token);
    assert.equal(refused.headers.get("retry-after"), "30");
    await assertError(refused, 503, "temporarily_unavailable", /confirm/);
    assert.ok(await sessionOf(t));
    assert.deepEqual(t.upstream.revokedTokens, []);

    t.upstream.membershipFailure = undefined;
    await refreshed(t, tokens.refresh_token);
    assert.equal((await sessionOf(t))?.access?.checkedAt, t.clock.now());
  } finally {
    t.close();
  }
});

Deno.test("access re-check: ACCESS_RECHECK_GRACE_SECONDS=0 lets no GitLab error keep a decision", async () => {
  const t = await makeTestApp({
    env: { ALLOWED_GITLAB_GROUPS: "acme", ACCESS_RECHECK_GRACE_SECONDS: "0" },
  });
  try {
    t.upstream.groupLevels = { acme: 10 };
    const tokens = await issueTokens(t);
    t.upstream.membershipFailure = new UpstreamError("transient", "http_502");
    t.clock.advance(5 * MINUTE + 1);
    await assertError(await refresh(t, tokens.refresh_token), 503, "temporarily_unavailable");
    assert.ok(await sessionOf(t), "the session is kept");
  } finally {
    t.close();
  }
});

Deno.test("access re-check: strict's grace is 0 unless set; the spec profile's an hour", () => {
  const base = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET };
  const strict = { ...base, SECURITY_PROFILE: "strict", BASE_URL: "https://auth.example" };
  assert.equal(
    loadConfig({ ...strict, ALLOWED_GITLAB_USERS: "ada" }).access.recheckGraceSeconds,
    0,
  );
  assert.equal(
    loadConfig({ ...strict, ALLOWED_GITLAB_USERS: "ada", ACCESS_RECHECK_GRACE_SECONDS: "60" })
      .access.recheckGraceSeconds,
    60,
  );
  assert.equal(loadConfig(base).access.recheckGraceSeconds, 3600);
  assert.equal(loadConfig(base).access.recheckSeconds, 300);
});

Deno.test("access re-check: the gateway re-checks a decision older than ACCESS_RECHECK_SECONDS before forwarding", async () => {
  const mcp = startScripted(echo);
  const logger = recordingLogger();
  const t = await makeTestApp({
    // A day's access token: the gateway, not the token's expiry, is what ends access here.
    env: {
      MCP_UPSTREAM_URL: mcp.url,
      ALLOWED_GITLAB_GROUPS: "acme:developer",
      ACCESS_TOKEN_TTL: "86400",
    },
    logger,
  });
  const call = async (token: string) => {
    const response = await mcpRequest(t, token, { body: "{}" });
    await response.body?.cancel();
    return response;
  };
  try {
    t.upstream.groupLevels = { acme: 30 };
    const tokens = await issueTokens(t);
    const asked = () => t.upstream.membershipsSeen.length;
    assert.equal((await call(tokens.access_token)).status, 200);
    assert.equal(asked(), 1, "not due: GitLab is not asked");

    // Due (ACCESS_RECHECK_SECONDS defaults to 300): asked again, still a developer, the new
    // decision is stored.
    t.clock.advance(5 * MINUTE + 1);
    assert.equal((await call(tokens.access_token)).status, 200);
    assert.equal(asked(), 2);
    assert.equal((await sessionOf(t))?.access?.checkedAt, t.clock.now());

    // GitLab down: the decision stands within the grace (an hour after it fell due)...
    t.upstream.membershipFailure = new UpstreamError("transient", "http_502");
    t.clock.advance(5 * MINUTE + 1);
    assert.equal((await call(tokens.access_token)).status, 200);
    const askedInOutage = asked();
    // ...and the next calls within 30 s do not wait for GitLab again.
    t.clock.advance(20_000);
    assert.equal((await call(tokens.access_token)).status, 200);
    assert.equal(asked(), askedInOutage, "not asked again within 30 s of a failure");
    t.clock.advance(11_000);
    assert.equal((await call(tokens.access_token)).status, 200);
    assert.ok(asked() > askedInOutage, "asked again after 30 s");
    // ...and past it the gateway answers 503 without forwarding, keeping the session.
    t.clock.advance(60 * MINUTE);
    const forwarded = mcp.requests.length;
    const unconfirmed = await mcpRequest(t, tokens.access_token, { body: "{}" });
    assert.equal(unconfirmed.status, 503);
    assert.equal((await unconfirmed.json()).error, "temporarily_unavailable");
    assert.equal(mcp.requests.length, forwarded, "not forwarded");
    assert.ok(await sessionOf(t));

    // Removed from the group (demoted below developer): the next request after the decision
    // fell due is refused and the session ends, no refresh needed.
    t.upstream.membershipFailure = undefined;
    t.upstream.groupLevels = { acme: 20 };
    const refused = await call(tokens.access_token);
    assert.equal(refused.status, 401);
    assert.match(refused.headers.get("www-authenticate") ?? "", /no longer allowed/);
    assert.equal(mcp.requests.length, forwarded, "not forwarded");
    assert.equal(await sessionOf(t), undefined);
    assert.ok(t.upstream.revokedTokens.includes("gl-access-0"), t.upstream.revokedTokens.join());
    await assertError(await refresh(t, tokens.refresh_token), 400, "invalid_grant");
  } finally {
    t.close();
    await mcp.close();
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
