/**
 * A misconfigured GitLab application: `/authorize` answers the spec's 500 "Failed to initiate
 * authentication", and the operator's log says what GitLab answered (status and error code,
 * never a secret) and which variable to check.
 */

import assert from "node:assert/strict";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { loadConfig } from "../src/app/config.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { createApp } from "../src/app/app.ts";
import { createLogger } from "../src/logger.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { authorizeQuery, FakeClock, TEST_BASE, TEST_SECRET } from "./_helpers.ts";

const CLIENT_SECRET = "gitlab-application-secret-never-logged";

/** The log lines of one `/authorize` against GitLab at `gitlabUrl` with `env` on top. */
async function authorizeAndLog(
  gitlabUrl: URL,
  env: Record<string, string>,
): Promise<Record<string, unknown>[]> {
  const config = loadConfig({
    GITLAB_URL: gitlabUrl.href,
    GITLAB_CLIENT_SECRET: CLIENT_SECRET,
    JWT_SECRET: TEST_SECRET,
    BASE_URL: TEST_BASE,
    ...env,
  });
  const lines: string[] = [];
  const kv = await Deno.openKv(":memory:");
  try {
    const deps = createAppDeps(config, {
      kv,
      clock: new FakeClock(Date.now()),
      logger: createLogger((line) => lines.push(line)),
      templates: await loadTemplates(),
    });
    const response = await createApp(deps)(
      new Request(`${TEST_BASE}/authorize?${authorizeQuery()}`),
    );
    assert.equal(response.status, 500);
    assert.deepEqual(await response.json(), {
      error: "server_error",
      error_description: "Failed to initiate authentication",
    });
  } finally {
    kv.close();
  }
  for (const line of lines) {
    assert.ok(!line.includes(CLIENT_SECRET), `a secret was logged: ${line}`);
    assert.ok(!line.includes(TEST_SECRET), `a secret was logged: ${line}`);
  }
  return lines.map((line) => JSON.parse(line));
}

/** The one line saying GitLab refused the application. */
function refusal(lines: Record<string, unknown>[]): Record<string, unknown> {
  const found = lines.filter((line) => line.message === "upstream refused our application");
  assert.equal(found.length, 1, JSON.stringify(lines));
  return found[0];
}

Deno.test("misconfigured: a client id GitLab does not know → 500, logged with 401 invalid_client and GITLAB_CLIENT_ID", async () => {
  const gitlab = startSimulatedGitLab({ clientId: "the-registered-app" });
  try {
    const line = refusal(await authorizeAndLog(gitlab.url, { GITLAB_CLIENT_ID: "a-typo" }));
    assert.equal(line.operation, "start_device_authorization");
    assert.equal(line.status, 401);
    assert.equal(line.code, "invalid_client");
    assert.match(String(line.hint), /GITLAB_CLIENT_ID/);
    assert.match(String(line.hint), /GITLAB_CLIENT_SECRET/);
  } finally {
    await gitlab.close();
  }
});

Deno.test("misconfigured: GITLAB_URL not a GitLab (404) → 500, logged with 404 and GITLAB_URL", async () => {
  const gitlab = startSimulatedGitLab();
  try {
    const line = refusal(
      await authorizeAndLog(new URL("/not-gitlab/", gitlab.url), { GITLAB_CLIENT_ID: "app" }),
    );
    assert.equal(line.status, 404);
    assert.equal(line.code, "http_404");
    assert.match(String(line.hint), /GITLAB_URL/);
  } finally {
    await gitlab.close();
  }
});

Deno.test("misconfigured: scopes the application may not ask for → 500, logged with invalid_scope and GITLAB_SCOPES", async () => {
  // GitLab's answer to a scope the application was not registered with.
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    await request.body?.cancel();
    return Response.json({
      error: "invalid_scope",
      error_description: "The requested scope is invalid, unknown, or malformed.",
    }, { status: 400 });
  });
  try {
    const url = new URL(`http://127.0.0.1:${server.addr.port}`);
    const line = refusal(
      await authorizeAndLog(url, { GITLAB_CLIENT_ID: "app", GITLAB_SCOPES: "api sudo" }),
    );
    assert.equal(line.status, 400);
    assert.equal(line.code, "invalid_scope");
    assert.match(String(line.hint), /GITLAB_SCOPES/);
  } finally {
    await server.shutdown();
  }
});
