/**
 * GitLab failing in every way the simulated GitLab can, seen through the real app and the real
 * GitLab client: a failed device start answers the spec's 500 and stores nothing; a failed poll
 * or user lookup leaves the flow pending and the next poll completes (without spending the
 * device code twice); a failed upstream refresh answers 400 invalid_grant and the session lives
 * on. Nothing else ever answers 500, and nothing is logged as an unhandled error.
 */

import { createAppDeps } from "../src/app/deps.ts";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import assert from "node:assert/strict";
import {
  type SimulatedFailure,
  type SimulatedGitLab,
  startSimulatedGitLab,
} from "../dev/simulated_gitlab.ts";
import { createApp, type FetchHandler } from "../src/app/app.ts";
import { loadConfig } from "../src/app/config.ts";
import { createLogger } from "../src/logger.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import type { Store } from "../src/store/mod.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  authorizeQuery,
  countRecords,
  FakeClock,
  gitlabTokensOf,
  PKCE,
  startFlow,
  TEST_BASE,
  TEST_REDIRECT as REDIRECT,
  TEST_SECRET,
} from "./_helpers.ts";
import { spawnService } from "./_service.ts";

/** Small, so that `timeout` failures are quick; the simulated GitLab answers in ~1 ms. */
const TIMEOUT_MS = 500;

/** The real app over `:memory:` KV with the real GitLab client aimed at `gitlabUrl`. */
interface GitLabApp {
  app: FetchHandler;
  kv: Deno.Kv;
  store: Store;
  clock: FakeClock;
  logs: string[];
  close(): void;
}

async function makeGitLabApp(gitlabUrl: URL, env: Record<string, string> = {}): Promise<GitLabApp> {
  const config = loadConfig({
    GITLAB_URL: gitlabUrl.href,
    GITLAB_CLIENT_ID: "failures-app",
    JWT_SECRET: TEST_SECRET,
    BASE_URL: TEST_BASE,
    UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS),
    ...env,
  });
  const logs: string[] = [];
  const logger = createLogger((line) => logs.push(line));
  const kv = await Deno.openKv(":memory:");
  // Starts at the wall clock: the simulated GitLab's own expiries are on it.
  const clock = new FakeClock(Date.now());
  const deps = createAppDeps(config, { kv, clock, logger, templates: await loadTemplates() });
  const { store } = deps;
  const app = createApp(deps);
  return { app, kv, store, clock, logs, close: () => kv.close() };
}

/** A simulated GitLab and an app using it, both closed afterwards; checks the logs at the end. */
async function withSetup(
  fn: (gitlab: SimulatedGitLab, t: GitLabApp) => Promise<void>,
  expected500s = 0,
): Promise<void> {
  const gitlab = startSimulatedGitLab();
  const t = await makeGitLabApp(gitlab.url);
  try {
    await fn(gitlab, t);
    assertNoUnhandled(t.logs, expected500s);
  } finally {
    t.close();
    await gitlab.close();
  }
}

/** No unhandled error logged, and no 500 answered beyond the spec's `expected500s`. */
function assertNoUnhandled(logs: string[], expected500s = 0): void {
  assert.deepEqual(logs.filter((line) => line.includes("unhandled error")), []);
  const served500 = logs.filter((line) => line.includes('"status":500'));
  assert.equal(served500.length, expected500s, served500.join("\n"));
  for (const line of served500) assert.match(line, /"path":"\/authorize"/);
}

interface Result {
  status: number;
  body: Record<string, unknown>;
}

async function call(t: GitLabApp, path: string, init?: RequestInit): Promise<Result> {
  const response = await t.app(new Request(`${TEST_BASE}${path}`, init));
  return { status: response.status, body: await response.json() };
}

function poll(t: GitLabApp, flowState: string): Promise<Result> {
  return call(t, `/oauth/poll?flow_state=${encodeURIComponent(flowState)}`);
}

function postToken(t: GitLabApp, form: Record<string, string>): Promise<Result> {
  return call(t, "/token", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form),
  });
}

function exchange(t: GitLabApp, code: string): Promise<Result> {
  return postToken(t, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: REDIRECT,
  });
}

function refresh(t: GitLabApp, refreshToken: string): Promise<Result> {
  return postToken(t, { grant_type: "refresh_token", refresh_token: refreshToken });
}

const START_FAILED = {
  status: 500,
  body: { error: "server_error", error_description: "Failed to initiate authentication" },
};

/** Signs in (authorize, approve, poll, exchange); returns the token response body. */
async function signIn(gitlab: SimulatedGitLab, t: GitLabApp): Promise<Record<string, unknown>> {
  const flowState = await startFlow(t);
  gitlab.approve(gitlab.lastUserCode()!);
  const done = await poll(t, flowState);
  assert.equal(done.body.status, "complete", JSON.stringify(done.body));
  const tokens = await exchange(t, done.body.code as string);
  assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
  return tokens.body;
}

/** Moves the clock to within the refresh buffer of the session's GitLab token expiry. */
async function makeGitLabTokenExpiring(t: GitLabApp, refreshToken: string): Promise<void> {
  const session = await findSessionByRefreshToken(t.store, refreshToken);
  assert.ok(session);
  assert.ok(session.value.upstreamTokenExpiry > 0);
  t.clock.current = session.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + 60_000;
}

// --- /authorize: the device start fails ------------------------------------------------------

const START_FAILURES: SimulatedFailure[] = ["500", "429", "malformed", "timeout"];

Deno.test("upstream failures: device start fails → 500 'Failed to initiate authentication', nothing stored", async (t) => {
  for (const mode of START_FAILURES) {
    await t.step(`authorize_device ${mode}`, () =>
      withSetup(async (gitlab, app) => {
        gitlab.failNext("authorize_device", mode);
        assert.deepEqual(await call(app, `/authorize?${authorizeQuery()}`), START_FAILED);
        assert.equal(gitlab.calls.authorizeDevice, 1);
        assert.deepEqual(await recordsOf(app.kv), [], "nothing half-written");
        // GitLab is back: the next authorization works.
        await startFlow(app);
        assert.equal(await countRecords(app.kv, "flow"), 1);
        assert.ok(app.logs.some((line) => line.includes("device flow start failed")));
      }, 1));
  }
});

Deno.test("upstream failures: GitLab unreachable (connection refused) → 500, nothing stored", async () => {
  const gitlab = startSimulatedGitLab();
  await gitlab.close();
  const app = await makeGitLabApp(gitlab.url);
  try {
    assert.deepEqual(await call(app, `/authorize?${authorizeQuery()}`), START_FAILED);
    assert.deepEqual(await recordsOf(app.kv), []);
    // Operations that need no GitLab answer as usual.
    const unknown = await poll(app, "no-such-flow");
    assert.deepEqual(unknown, {
      status: 400,
      body: { status: "expired", error: "Flow not found" },
    });
    assertNoUnhandled(app.logs, 1);
  } finally {
    app.close();
  }
});

Deno.test("upstream failures: device start fails in a service process → 500, its KV file stays empty", async () => {
  const dir = await Deno.makeTempDir({ prefix: "upstream-failures-" });
  const kvPath = `${dir}/kv.sqlite`;
  const gitlab = startSimulatedGitLab();
  const closed = startSimulatedGitLab();
  await closed.close();
  try {
    for (const [gitlabUrl, mode] of [[gitlab.url, "500"], [closed.url, "refused"]] as const) {
      if (mode === "500") gitlab.failNext("authorize_device", "500");
      const service = await spawnService({
        GITLAB_URL: gitlabUrl.href,
        GITLAB_CLIENT_ID: "failures-app",
        JWT_SECRET: TEST_SECRET,
        KV_PATH: kvPath,
        UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS),
      });
      try {
        const response = await fetch(`${service.url}/authorize?${authorizeQuery()}`);
        assert.deepEqual(
          { status: response.status, body: await response.json() },
          START_FAILED,
          mode,
        );
      } finally {
        assert.equal(await service.stop(), 0);
      }
      assert.deepEqual(service.logs.filter((line) => line.includes("unhandled error")), []);
      const kv = await Deno.openKv(kvPath);
      try {
        assert.deepEqual(await recordsOf(kv), [], `${mode}: nothing half-written`);
      } finally {
        kv.close();
      }
    }
  } finally {
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});

// --- /oauth/poll: the device-token poll fails ----------------------------------------------

const POLL_FAILURES: SimulatedFailure[] = ["500", "429", "malformed", "timeout", "slow_down"];

Deno.test("upstream failures: device-token poll fails → 200 pending, flow kept, next poll completes", async (t) => {
  for (const mode of POLL_FAILURES) {
    await t.step(`token ${mode}`, () =>
      withSetup(async (gitlab, app) => {
        const flowState = await startFlow(app);
        gitlab.approve(gitlab.lastUserCode()!);
        gitlab.failNext("token", mode);
        assert.deepEqual(await poll(app, flowState), { status: 200, body: { status: "pending" } });
        assert.equal(gitlab.calls.deviceToken, 1);
        assert.equal(await countRecords(app.kv, "flow"), 1, "the flow survives");
        assert.equal(await countRecords(app.kv, "session"), 0);
        assert.equal(await countRecords(app.kv, "code"), 0);
        assert.equal(await countRecords(app.kv, "lease"), 0, "the poll lease was released");
        // Not polled again before the interval has passed (RFC 8628 §3.5: grown to 5 + 5 s
        // after slow_down; 429's Retry-After of 1 s is shorter than the interval).
        assert.deepEqual(await poll(app, flowState), {
          status: 200,
          body: { status: "pending" },
        });
        assert.equal(gitlab.calls.deviceToken, 1);
        app.clock.advance(mode === "slow_down" ? 10_000 : 5_000);
        const done = await poll(app, flowState);
        assert.equal(done.status, 200, JSON.stringify(done.body));
        assert.equal(done.body.status, "complete");
        assert.equal(gitlab.calls.deviceToken, 2);
        assert.equal(await countRecords(app.kv, "flow"), 0);
        const tokens = await exchange(app, done.body.code as string);
        assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
      }));
  }
});

Deno.test("upstream failures: several failures in a row, then success", () =>
  withSetup(async (gitlab, app) => {
    const flowState = await startFlow(app);
    for (const mode of ["500", "429", "malformed", "timeout"] as const) {
      gitlab.failNext("token", mode);
    }
    for (let i = 0; i < 4; i++) {
      assert.deepEqual(await poll(app, flowState), { status: 200, body: { status: "pending" } });
      app.clock.advance(5_000);
    }
    // Not yet approved: GitLab itself says authorization_pending.
    assert.deepEqual(await poll(app, flowState), { status: 200, body: { status: "pending" } });
    app.clock.advance(5_000);
    gitlab.approve(gitlab.lastUserCode()!);
    const done = await poll(app, flowState);
    assert.equal(done.body.status, "complete", JSON.stringify(done.body));
    assert.equal(gitlab.calls.deviceToken, 6);
  }));

// --- /oauth/poll: the user lookup fails after the device token arrived --------------------

const USER_FAILURES: SimulatedFailure[] = ["500", "429", "malformed", "timeout"];

Deno.test("upstream failures: user lookup fails transiently → pending; next poll completes without polling the device endpoint again", async (t) => {
  for (const mode of USER_FAILURES) {
    await t.step(`user ${mode}`, () =>
      withSetup(async (gitlab, app) => {
        const flowState = await startFlow(app);
        gitlab.approve(gitlab.lastUserCode()!);
        gitlab.failNext("user", mode);
        assert.deepEqual(await poll(app, flowState), { status: 200, body: { status: "pending" } });
        assert.equal(gitlab.calls.deviceToken, 1);
        assert.equal(gitlab.calls.user, 1);
        assert.equal(await countRecords(app.kv, "flow"), 1, "the flow keeps the GitLab token");
        assert.equal(await countRecords(app.kv, "session"), 0);

        const done = await poll(app, flowState);
        assert.equal(done.body.status, "complete", JSON.stringify(done.body));
        assert.equal(gitlab.calls.deviceToken, 1, "the device code was not polled again");
        assert.equal(gitlab.calls.user, 2);
        const tokens = await exchange(app, done.body.code as string);
        assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
      }));
  }
});

// --- GitLab issues no refresh token ------------------------------------------------------

Deno.test("upstream failures: device token without refresh_token → completes; a later upstream refresh → 400 invalid_grant", () =>
  withSetup(async (gitlab, app) => {
    const flowState = await startFlow(app);
    gitlab.approve(gitlab.lastUserCode()!);
    gitlab.failNext("token", "no_refresh_token");
    const done = await poll(app, flowState);
    assert.equal(done.body.status, "complete", JSON.stringify(done.body));
    const tokens = await exchange(app, done.body.code as string);
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));

    // The session works while the GitLab token is fresh.
    const refreshed = await refresh(app, tokens.body.refresh_token as string);
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
    assert.equal(gitlab.calls.refresh, 0);

    // Once the GitLab token is expiring it cannot be renewed.
    const current = refreshed.body.refresh_token as string;
    await makeGitLabTokenExpiring(app, current);
    assert.deepEqual(await refresh(app, current), {
      status: 400,
      body: {
        error: "invalid_grant",
        error_description: "Failed to refresh underlying upstream token",
      },
    });
    assert.equal(await countRecords(app.kv, "lease"), 0);
  }));

// --- POST /token refresh: the upstream refresh fails -------------------------------------

const REFRESH_FAILURES: SimulatedFailure[] = ["500", "429", "malformed", "timeout"];

Deno.test("upstream failures: upstream refresh fails → 400 invalid_grant; the session is still usable later", async (t) => {
  for (const mode of REFRESH_FAILURES) {
    await t.step(`refresh ${mode}`, () =>
      withSetup(async (gitlab, app) => {
        const tokens = await signIn(gitlab, app);
        const refreshToken = tokens.refresh_token as string;
        await makeGitLabTokenExpiring(app, refreshToken);
        const before = await findSessionByRefreshToken(app.store, refreshToken);

        gitlab.failNext("refresh", mode);
        assert.deepEqual(await refresh(app, refreshToken), {
          status: 400,
          body: {
            error: "invalid_grant",
            error_description: "Failed to refresh underlying upstream token",
          },
        });
        assert.equal(gitlab.calls.refresh, 1);
        const unchanged = await findSessionByRefreshToken(app.store, refreshToken);
        assert.ok(unchanged, "the refresh token still names the session");
        assert.equal(unchanged.value.sealedUpstreamTokens, before!.value.sealedUpstreamTokens);
        assert.equal(await countRecords(app.kv, "lease"), 0, "the refresh lease was released");

        // GitLab is back: the same refresh token works, and the GitLab token is renewed.
        const later = await refresh(app, refreshToken);
        assert.equal(later.status, 200, JSON.stringify(later.body));
        assert.equal(gitlab.calls.refresh, 2);
        const renewed = await findSessionByRefreshToken(
          app.store,
          later.body.refresh_token as string,
        );
        assert.ok(renewed);
        assert.notDeepEqual(
          await gitlabTokensOf(app.store, renewed),
          await gitlabTokensOf(app.store, before),
        );
        assert.ok(renewed.value.upstreamTokenExpiry > app.clock.now() + UPSTREAM_REFRESH_BUFFER_MS);
      }));
  }
});

Deno.test("upstream failures: GitLab gone during a refresh (connection refused) → 400 invalid_grant", async () => {
  const gitlab = startSimulatedGitLab();
  const app = await makeGitLabApp(gitlab.url);
  try {
    const tokens = await signIn(gitlab, app);
    await makeGitLabTokenExpiring(app, tokens.refresh_token as string);
    await gitlab.close();
    assert.deepEqual(await refresh(app, tokens.refresh_token as string), {
      status: 400,
      body: {
        error: "invalid_grant",
        error_description: "Failed to refresh underlying upstream token",
      },
    });
    assertNoUnhandled(app.logs);
  } finally {
    app.close();
    await gitlab.close();
  }
});

Deno.test("upstream failures: GitLab gone during a poll (connection refused) → pending, flow kept", async () => {
  const gitlab = startSimulatedGitLab();
  const app = await makeGitLabApp(gitlab.url);
  try {
    const flowState = await startFlow(app);
    await gitlab.close();
    assert.deepEqual(await poll(app, flowState), { status: 200, body: { status: "pending" } });
    assert.equal(await countRecords(app.kv, "flow"), 1);
    assertNoUnhandled(app.logs);
  } finally {
    app.close();
    await gitlab.close();
  }
});
