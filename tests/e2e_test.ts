/**
 * End to end over real HTTP: the service as a child process (`main.ts`), the real GitLab
 * client, and the simulated GitLab on loopback.
 */

import assert from "node:assert/strict";
import { jwtVerify } from "jose";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { TEST_SECRET } from "./_helpers.ts";
import {
  authorizeOverHttp,
  exchangeOverHttp,
  pollOverHttp,
  postToken,
  type ServiceProcess,
  signInOverHttp,
  spawnService,
} from "./_service.ts";

const REDIRECT_URI = "http://127.0.0.1:9/callback";
const AUTHORIZE = { client_id: "e2e-client", redirect_uri: REDIRECT_URI, state: "s-1" };

function serviceEnv(gitlabUrl: URL, extra: Record<string, string> = {}): Record<string, string> {
  return {
    GITLAB_URL: gitlabUrl.href,
    GITLAB_CLIENT_ID: "e2e-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
    ...extra,
  };
}

async function authorize(service: ServiceProcess): Promise<string> {
  return (await authorizeOverHttp(service.url, AUTHORIZE)).flowState;
}

/**
 * A GitLab announcing `interval: 0`: the service may ask again at once, so a poll right after
 * the approval reaches GitLab without the test waiting out an interval on the wall clock.
 */
const NO_INTERVAL = { interval: 0 };

Deno.test("e2e: authorize → approve at GitLab → poll → code exchange → refresh, over HTTP", async () => {
  const gitlab = startSimulatedGitLab(NO_INTERVAL);
  const service = await spawnService(serviceEnv(gitlab.url));
  try {
    const flowState = await authorize(service);
    assert.equal(gitlab.calls.authorizeDevice, 1);
    assert.deepEqual(await pollOverHttp(service.url, flowState), {
      status: 200,
      body: { status: "pending" },
    });
    gitlab.approve(gitlab.lastUserCode()!);
    const done = await pollOverHttp(service.url, flowState);
    assert.equal(done.body.status, "complete");
    assert.equal(done.body.redirect_uri, REDIRECT_URI);
    assert.equal(done.body.state, "s-1");
    assert.equal(gitlab.calls.user, 1);

    const tokens = await exchangeOverHttp(service.url, done.body.code, REDIRECT_URI);
    assert.equal(tokens.status, 200);
    const { payload } = await jwtVerify(
      tokens.body.access_token,
      new TextEncoder().encode(TEST_SECRET),
      { algorithms: ["HS256"], issuer: service.url, audience: "e2e-client" },
    );
    assert.equal(payload.sub, "4242");
    assert.equal(payload.gitlab_user, "ada");

    const refreshed = await postToken(service.url, {
      grant_type: "refresh_token",
      refresh_token: tokens.body.refresh_token,
    });
    assert.equal(refreshed.status, 200);
    assert.notEqual(refreshed.body.refresh_token, tokens.body.refresh_token);
    const replay = await postToken(service.url, {
      grant_type: "refresh_token",
      refresh_token: tokens.body.refresh_token,
    });
    assert.equal(replay.status, 400);
    assert.equal(replay.body.error, "invalid_grant");
  } finally {
    assert.equal(await service.stop(), 0);
    await gitlab.close();
  }
});

Deno.test("e2e: denied at GitLab → poll answers failed with access_denied", async () => {
  const gitlab = startSimulatedGitLab();
  const service = await spawnService(serviceEnv(gitlab.url));
  try {
    const flowState = await authorize(service);
    gitlab.deny(gitlab.lastUserCode()!);
    assert.deepEqual(await pollOverHttp(service.url, flowState), {
      status: 200,
      body: { status: "failed", error: "access_denied" },
    });
    assert.deepEqual(await pollOverHttp(service.url, flowState), {
      status: 400,
      body: { status: "expired", error: "Flow not found" },
    });
  } finally {
    await service.stop();
    await gitlab.close();
  }
});

Deno.test("e2e: a refresh token survives a restart on a file-backed KV", async () => {
  const gitlab = startSimulatedGitLab(NO_INTERVAL);
  const dir = await Deno.makeTempDir();
  const env = serviceEnv(gitlab.url, { KV_PATH: `${dir}/kv.sqlite` });
  try {
    const first = await spawnService(env);
    let tokens;
    try {
      tokens = await signInOverHttp(first.url, gitlab, {
        redirectUri: REDIRECT_URI,
        clientId: AUTHORIZE.client_id,
        state: AUTHORIZE.state,
        pollBeforeApproval: true,
      });
    } finally {
      assert.equal(await first.stop(), 0);
    }
    const second = await spawnService(env);
    try {
      const refreshed = await postToken(second.url, {
        grant_type: "refresh_token",
        refresh_token: tokens.refresh_token,
      });
      assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
      assert.equal(refreshed.body.scope, "mcp:tools mcp:resources");
    } finally {
      await second.stop();
    }
  } finally {
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e: a flow started before a restart completes after it", async () => {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir();
  const env = serviceEnv(gitlab.url, { KV_PATH: `${dir}/kv.sqlite` });
  try {
    const first = await spawnService(env);
    let flowState;
    try {
      flowState = await authorize(first);
    } finally {
      await first.stop();
    }
    gitlab.approve(gitlab.lastUserCode()!);
    const second = await spawnService(env);
    try {
      const done = await pollOverHttp(second.url, flowState);
      assert.equal(done.body.status, "complete");
    } finally {
      await second.stop();
    }
  } finally {
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e: without GITLAB_CLIENT_ID and JWT_SECRET it starts, warns once, answers 500", async () => {
  const service = await spawnService({ KV_PATH: ":memory:" });
  try {
    const authorizeResponse = await fetch(`${service.url}/authorize?response_type=code`);
    assert.equal(authorizeResponse.status, 500);
    assert.deepEqual(await authorizeResponse.json(), {
      error: "server_error",
      error_description: "OAuth not configured",
    });
    const pollResponse = await fetch(`${service.url}/oauth/poll?flow_state=x`);
    assert.equal(pollResponse.status, 500);
    assert.deepEqual(await pollResponse.json(), { error: "server_error" });
    const tokenResponse = await postToken(service.url, { grant_type: "refresh_token" });
    assert.equal(tokenResponse.status, 500);
    assert.equal(tokenResponse.body.error_description, "OAuth not configured");
    const warnings = service.logs.filter((line) => line.includes("not configured"));
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /GITLAB_CLIENT_ID and JWT_SECRET/);
  } finally {
    await service.stop();
  }
});

Deno.test("e2e: a wrong configuration value stops start-up with one line naming it", async () => {
  for (
    const [name, value, named = name] of [
      ["JWT_SECRET", "too-short"],
      ["ACCESS_TOKEN_TTL", "soon"],
      ["GITLAB_URL", "not a url"],
      // The strict profile without the BASE_URL it needs names BASE_URL.
      ["SECURITY_PROFILE", "strict", "BASE_URL"],
    ]
  ) {
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-all", new URL("../main.ts", import.meta.url).pathname, "start"],
      env: { [name]: value, KV_PATH: ":memory:", PORT: "0" },
      stdout: "piped",
      stderr: "piped",
      // A service that starts instead of refusing is stopped, and fails the exit-code check.
      signal: AbortSignal.timeout(30_000),
    }).output();
    assert.equal(output.code, 1);
    const lines = new TextDecoder().decode(output.stdout).trim().split("\n");
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(lines[0], new RegExp(named));
    if (name === "JWT_SECRET") assert.doesNotMatch(lines[0], /too-short/);
  }
});
