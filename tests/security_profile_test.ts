/**
 * SECURITY_PROFILE: `spec` (the default) runs the spec to the letter; `strict` turns on the
 * production policies, needs BASE_URL and sends Strict-Transport-Security over https. A variable
 * set explicitly wins over the profile.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import {
  assertError,
  authorizeQuery,
  issueTokens,
  refresh,
  TEST_BASE,
  withEnv,
} from "./_helpers.ts";
import { spawnService } from "./_service.ts";

const STRICT = {
  SECURITY_PROFILE: "strict",
  BASE_URL: "https://auth.example",
  // Strict refuses an open gitlab.com (tests/access_config_test.ts); these tests are of the rest.
  ALLOW_ANY_GITLAB_USER: "true",
};

Deno.test("security profile: spec by default changes nothing", () => {
  const config = loadConfig({});
  assert.equal(config.securityProfile, "spec");
  assert.equal(config.redirectUriPolicy, "any");
  assert.equal(config.revokeOnCodeReplay, false);
  assert.equal(config.revokeOnRefreshReplay, false);
});

Deno.test("security profile: strict turns on the registered policy and both replay revocations", () => {
  const config = loadConfig(STRICT);
  assert.equal(config.securityProfile, "strict");
  assert.equal(config.redirectUriPolicy, "registered");
  assert.equal(config.revokeOnCodeReplay, true);
  assert.equal(config.revokeOnRefreshReplay, true);
  assert.equal(loadConfig({ ...STRICT, SECURITY_PROFILE: "STRICT" }).securityProfile, "strict");
});

Deno.test("security profile: an explicitly set variable wins over the profile", () => {
  const config = loadConfig({
    ...STRICT,
    REDIRECT_URI_POLICY: "any",
    REVOKE_ON_CODE_REPLAY: "false",
    REVOKE_ON_REFRESH_REPLAY: "false",
  });
  assert.equal(config.redirectUriPolicy, "any");
  assert.equal(config.revokeOnCodeReplay, false);
  assert.equal(config.revokeOnRefreshReplay, false);
  assert.equal(
    loadConfig({ REVOKE_ON_REFRESH_REPLAY: "true" }).revokeOnRefreshReplay,
    true,
    "and the policies stay available one by one under spec",
  );
});

Deno.test("security profile: strict without BASE_URL refuses to start, in one line naming BASE_URL", () => {
  let caught: unknown;
  try {
    loadConfig({ SECURITY_PROFILE: "strict" });
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ConfigError);
  assert.equal(caught.variable, "BASE_URL");
  assert.throws(() => loadConfig({ SECURITY_PROFILE: "lenient" }), ConfigError);
  // The process's one line: tests/e2e_test.ts "a wrong configuration value stops start-up".
});

Deno.test("security profile: the start-up line says which profile runs, HSTS over real HTTP", async () => {
  const service = await spawnService({ ...STRICT, KV_PATH: ":memory:" });
  try {
    const listening = service.logs.find((line) => line.includes('"listening"'));
    assert.ok(listening);
    assert.equal(JSON.parse(listening).securityProfile, "strict");
    const health = await fetch(`${service.url}/healthz`);
    await health.body?.cancel();
    assert.equal(health.headers.get("strict-transport-security"), "max-age=31536000");
  } finally {
    assert.equal(await service.stop(), 0);
  }
});

Deno.test("security profile: strict sends Strict-Transport-Security when BASE_URL is https, only then", async () => {
  const hsts = async (env: Record<string, string>) => {
    let value: string | null = null;
    await withEnv(env, async (t) => {
      const response = await t.app(new Request(`${TEST_BASE}/healthz`));
      await response.body?.cancel();
      value = response.headers.get("strict-transport-security");
    });
    return value;
  };
  assert.equal(await hsts(STRICT), "max-age=31536000");
  assert.equal(await hsts({ ...STRICT, BASE_URL: "http://auth.example" }), null);
  assert.equal(await hsts({ BASE_URL: "https://auth.example" }), null, "not under spec");
});

Deno.test("security profile: strict refuses an unregistered client at /authorize", () =>
  withEnv(STRICT, async (t) => {
    const query = authorizeQuery({ client_id: "never-registered" });
    await assertError(
      await t.app(new Request(`${TEST_BASE}/authorize?${query}`)),
      400,
      "invalid_request",
      "Unknown client_id",
    );
  }));

Deno.test("security profile: strict ends a session whose rotated refresh token comes back", () =>
  // The device flow explicitly: strict would otherwise sign in by redirect (issue 22 §1.2).
  withEnv({ ...STRICT, REDIRECT_URI_POLICY: "any", GITLAB_SIGN_IN: "device" }, async (t) => {
    const { refresh_token: previous } = await issueTokens(t);
    const current = (await (await refresh(t, previous)).json()).refresh_token;
    await assertError(await refresh(t, previous), 400, "invalid_grant");
    await assertError(await refresh(t, current), 400, "invalid_grant");
  }));
