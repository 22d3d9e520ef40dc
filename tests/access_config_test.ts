/**
 * Who may sign in, as configured: ALLOWED_GITLAB_GROUPS (with roles), ALLOWED_GITLAB_USERS,
 * the scope the group check needs, and the strict profile's refusal of an open gitlab.com.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { accessPolicyOf } from "../src/access/config.ts";
import { spawnService } from "./_service.ts";
import { TEST_SECRET } from "./_helpers.ts";

const CONFIGURED = { GITLAB_CLIENT_ID: "gitlab-app-id", JWT_SECRET: TEST_SECRET };
const STRICT = { ...CONFIGURED, SECURITY_PROFILE: "strict", BASE_URL: "https://auth.example" };

function refusal(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    assert.doesNotMatch(error.message, /[\r\n]/, "one line");
    return error;
  }
  throw new Error(`${JSON.stringify(env)} was accepted`);
}

Deno.test("access config: groups with and without a role, users, defaults", () => {
  const config = loadConfig({
    ...CONFIGURED,
    ALLOWED_GITLAB_GROUPS: " acme , acme/platform:Developer,",
    ALLOWED_GITLAB_USERS: "@Ada, grace",
  });
  assert.deepEqual(accessPolicyOf(config), {
    groups: [{ path: "acme" }, { path: "acme/platform", minRole: "Developer" }],
    users: ["ada", "grace"],
  });
  assert.equal(config.access.recheckSeconds, 300);
  assert.equal(config.access.recheckGraceSeconds, 3600);
  assert.deepEqual(accessPolicyOf(loadConfig(CONFIGURED)), { groups: [], users: [] });
});

Deno.test("access config: unknown roles and malformed entries are refused naming the variable", () => {
  for (const groups of ["acme:admin", "acme:developer:x", "acme//platform", "acme/plat form"]) {
    const error = refusal({ ...CONFIGURED, ALLOWED_GITLAB_GROUPS: groups });
    assert.equal(error.variable, "ALLOWED_GITLAB_GROUPS", groups);
  }
  assert.equal(
    refusal({ ...CONFIGURED, ALLOWED_GITLAB_USERS: "a b" }).variable,
    "ALLOWED_GITLAB_USERS",
  );
});

Deno.test("access config: a list of commas alone is refused, not read as no list (anyone)", () => {
  for (const name of ["ALLOWED_GITLAB_GROUPS", "ALLOWED_GITLAB_USERS"]) {
    for (const value of [",", " , ,", ",,"]) {
      const error = refusal({ ...CONFIGURED, ALLOWED_GITLAB_USERS: "ada", [name]: value });
      assert.equal(error.variable, name, value);
      assert.match(error.message, /lists no (group|user)/);
    }
  }
});

Deno.test("access config: groups need read_api or api in GITLAB_SCOPES, in one line naming both", () => {
  const error = refusal({
    ...CONFIGURED,
    GITLAB_SCOPES: "read_user openid",
    ALLOWED_GITLAB_GROUPS: "acme",
  });
  assert.match(error.message, /ALLOWED_GITLAB_GROUPS/);
  assert.match(error.message, /GITLAB_SCOPES/);
  for (const scopes of ["read_api", "read_user api", "read_user read_api"]) {
    loadConfig({ ...CONFIGURED, GITLAB_SCOPES: scopes, ALLOWED_GITLAB_GROUPS: "acme" });
  }
  // The user list alone asks GitLab nothing more than who signed in.
  loadConfig({ ...CONFIGURED, GITLAB_SCOPES: "read_user", ALLOWED_GITLAB_USERS: "ada" });
});

Deno.test("access config: strict refuses gitlab.com without a list unless ALLOW_ANY_GITLAB_USER=true", () => {
  const error = refusal(STRICT);
  assert.match(error.message, /ALLOWED_GITLAB_GROUPS/);
  assert.match(error.message, /ALLOW_ANY_GITLAB_USER=true/);
  refusal({ ...STRICT, GITLAB_URL: "https://gitlab.com/" });
  loadConfig({ ...STRICT, ALLOW_ANY_GITLAB_USER: "true" });
  loadConfig({ ...STRICT, ALLOWED_GITLAB_USERS: "ada" });
  loadConfig({ ...STRICT, ALLOWED_GITLAB_GROUPS: "acme" });
  // A self-hosted instance's accounts are the operator's own.
  loadConfig({ ...STRICT, GITLAB_URL: "https://gitlab.example.com" });
  // Under the spec profile it starts, and warns (below).
  loadConfig(CONFIGURED);
});

Deno.test("access config: start-up warns once when anyone on gitlab.com may sign in", async () => {
  const warningsOf = async (env: Record<string, string>) => {
    const service = await spawnService({ ...CONFIGURED, KV_PATH: ":memory:", ...env });
    assert.equal(await service.stop(), 0);
    return service.logs.filter((line) => line.includes("ALLOWED_GITLAB_GROUPS"));
  };
  const open = await warningsOf({});
  assert.equal(open.length, 1, open.join("\n"));
  assert.equal(JSON.parse(open[0]).level, "warn");
  assert.match(open[0], /gitlab\.com/);
  assert.deepEqual(await warningsOf({ ALLOWED_GITLAB_USERS: "ada" }), []);
  assert.deepEqual(await warningsOf({ GITLAB_URL: "https://gitlab.example.com" }), []);
});

Deno.test("access config: strict on a self-managed GitLab with no list warns once at start-up", async () => {
  const warningsOf = async (env: Record<string, string>) => {
    const service = await spawnService({
      ...STRICT,
      GITLAB_URL: "https://gitlab.example.com",
      KV_PATH: ":memory:",
      ...env,
    });
    assert.equal(await service.stop(), 0);
    return service.logs.filter((line) => line.includes("ALLOWED_GITLAB_GROUPS"));
  };
  const open = await warningsOf({});
  assert.equal(open.length, 1, open.join("\n"));
  assert.equal(JSON.parse(open[0]).level, "warn");
  assert.match(open[0], /strict/);
  assert.match(open[0], /https:\/\/gitlab\.example\.com/);
  assert.deepEqual(await warningsOf({ ALLOWED_GITLAB_GROUPS: "acme" }), []);
  assert.deepEqual(await warningsOf({ ALLOW_ANY_GITLAB_USER: "true" }), []);
});

Deno.test("access config: group lists are refused at start-up for a provider without memberships", async () => {
  const { createAppDeps } = await import("../src/app/deps.ts");
  const { forgeProvider } = await import("./_generic_upstream.ts");
  const { loadTemplates } = await import("../src/pages/mod.ts");
  const { silentLogger } = await import("../src/logger.ts");
  const { FakeClock } = await import("./_helpers.ts");
  const providers = {
    forge: forgeProvider({
      deviceAuthorization: "d",
      authorize: "a",
      token: "t",
      user: "u",
      revoke: "r",
    }),
  };
  const forge = { UPSTREAM_PROVIDER: "forge", GITLAB_URL: "http://127.0.0.1:9" };
  const kv = await Deno.openKv(":memory:");
  try {
    const resources = {
      kv,
      clock: new FakeClock(),
      logger: silentLogger,
      templates: await loadTemplates(),
      providers,
    };
    const withGroups = loadConfig({ ...CONFIGURED, ...forge, ALLOWED_GITLAB_GROUPS: "acme" });
    assert.throws(
      () => createAppDeps(withGroups, resources),
      (error: unknown) =>
        error instanceof ConfigError && error.variable === "ALLOWED_GITLAB_GROUPS" &&
        /Forge/.test(error.message),
    );
    // A user list needs nothing but the user the provider names.
    createAppDeps(loadConfig({ ...CONFIGURED, ...forge, ALLOWED_GITLAB_USERS: "ada" }), resources);
  } finally {
    kv.close();
  }
});
