/**
 * A provider's roles are its own declaration (issue 34 §5): a second provider ("Forge",
 * tests/_generic_upstream.ts, added as a provider module is) declares `viewer`, `editor` and
 * `admin`; ALLOWED_GITLAB_GROUPS, MCP_POLICY_FILE and MCP_SERVERS_FILE name those roles and the
 * decisions go by Forge's levels, while a GitLab role name is refused for Forge in one line, at
 * start-up and on a reload (which keeps what is in force). GitLab's own behaviour is what the
 * access, policy and servers tests prove.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { createApp } from "../src/app/app.ts";
import { followConfigFiles } from "../src/app/file_reloads.ts";
import { silentLogger } from "../src/logger.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import type { ProviderRoles } from "../src/upstream/types.ts";
import { forgeProvider } from "./_generic_upstream.ts";
import {
  FakeClock,
  FakeUpstream,
  issueTokens,
  poll,
  startFlow,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { startScripted } from "./_gateway_mcp.ts";

/** Forge's roles: a group named without one asks for `viewer`. */
const FORGE_ROLES: ProviderRoles = {
  levels: { viewer: 10, editor: 20, admin: 30 },
  unnamed: "viewer",
};

/** Forge, as a provider module would declare it: its description with its roles. */
const FORGE = {
  ...forgeProvider({
    deviceAuthorization: "login/device/code",
    authorize: "login/oauth/authorize",
    token: "login/oauth/access_token",
    user: "api/user",
    revoke: "login/oauth/revoke",
  }),
  roles: FORGE_ROLES,
};

const FORGE_ENV = {
  UPSTREAM_PROVIDER: "forge",
  GITLAB_URL: "https://forge.test",
  GITLAB_CLIENT_ID: "forge-app",
  JWT_SECRET: TEST_SECRET,
  BASE_URL: TEST_BASE,
};

/** The real app with Forge chosen by UPSTREAM_PROVIDER; the fake upstream answers memberships. */
async function forgeApp(env: Record<string, string>): Promise<TestApp> {
  const config = loadConfig({ ...FORGE_ENV, ...env });
  const kv = await Deno.openKv(":memory:");
  const clock = new FakeClock();
  const upstream = new FakeUpstream();
  try {
    const deps = createAppDeps(config, {
      kv,
      clock,
      logger: silentLogger,
      templates: await loadTemplates(),
      upstream,
      providers: { forge: FORGE },
      gitlabFetch: upstream.idTokens.serve,
    });
    const close = () => {
      deps.servers.close();
      kv.close();
    };
    return { app: createApp(deps), kv, store: deps.store, clock, upstream, config, deps, close };
  } catch (error) {
    kv.close();
    throw error;
  }
}

/** Whether a device sign-in of the fake's user, with `groupLevels`, completes. */
async function signsIn(env: Record<string, string>, groupLevels: Record<string, number>) {
  const t = await forgeApp(env);
  try {
    t.upstream.groupLevels = groupLevels;
    const flowState = await startFlow(t);
    t.upstream.approve();
    const body = await (await poll(t, flowState)).json();
    return body.status;
  } finally {
    t.close();
  }
}

/** The one-line ConfigError Forge's app refuses `env` with. */
async function refusal(env: Record<string, string>): Promise<ConfigError> {
  try {
    (await forgeApp(env)).close();
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    assert.doesNotMatch(error.message, /[\r\n]/, "one line");
    return error;
  }
  throw new Error(`${JSON.stringify(env)} was accepted`);
}

async function writeFile(dir: string, name: string, data: unknown): Promise<string> {
  const path = `${dir}/${name}`;
  await Deno.writeTextFile(path, typeof data === "string" ? data : JSON.stringify(data));
  return path;
}

Deno.test("provider roles: ALLOWED_GITLAB_GROUPS names the provider's roles and admits by its levels", async () => {
  const editors = { ALLOWED_GITLAB_GROUPS: "crew:Editor" };
  assert.equal(await signsIn(editors, { crew: 10 }), "failed", "a viewer is below editor");
  assert.equal(await signsIn(editors, { crew: 20 }), "complete");
  assert.equal(await signsIn(editors, { crew: 30 }), "complete", "admin is above editor");
  // A group named without a role asks for Forge's `unnamed` role, viewer.
  assert.equal(await signsIn({ ALLOWED_GITLAB_GROUPS: "crew" }, { crew: 5 }), "failed");
  assert.equal(await signsIn({ ALLOWED_GITLAB_GROUPS: "crew" }, { crew: 10 }), "complete");
});

Deno.test("provider roles: a GitLab role name is refused for another provider, naming its roles", async () => {
  const listed = await refusal({ ALLOWED_GITLAB_GROUPS: "crew:developer" });
  assert.equal(listed.variable, "ALLOWED_GITLAB_GROUPS");
  assert.equal(
    listed.message,
    'ALLOWED_GITLAB_GROUPS: unknown role "developer" in "crew:developer"; roles: viewer, ' +
      "editor, admin",
  );
  // The role is echoed as the operator wrote it (matched in any case, never shown lowered).
  assert.equal(
    (await refusal({ ALLOWED_GITLAB_GROUPS: "Crew:Maintainer" })).message,
    'ALLOWED_GITLAB_GROUPS: unknown role "Maintainer" in "Crew:Maintainer"; roles: viewer, ' +
      "editor, admin",
  );
  const dir = await Deno.makeTempDir({ prefix: "provider-roles-" });
  try {
    const policy = await writeFile(dir, "policy.json", {
      rules: [{ tools: ["x"], allow: { groups: ["crew:editor", "ops:maintainer"] } }],
    });
    const fromPolicy = await refusal({ MCP_POLICY_FILE: policy });
    assert.equal(
      fromPolicy.message,
      `MCP_POLICY_FILE: ${policy}: rule 0 "allow" "groups": unknown role "maintainer" in ` +
        `"ops:maintainer"; roles: viewer, editor, admin`,
    );
    const servers = await writeFile(
      dir,
      "servers.yaml",
      "servers:\n  - name: docs\n    url: http://127.0.0.1:9/mcp\n" +
        '    allowed_gitlab_groups: ["crew:owner"]\n',
    );
    const fromServers = await refusal({ MCP_SERVERS_FILE: servers });
    assert.match(
      fromServers.message,
      /^MCP_SERVERS_FILE: .*servers\.yaml: server docs allowed_gitlab_groups: unknown role "owner"/,
    );
    // What Forge declares is accepted in every place.
    const good = await writeFile(
      dir,
      "good.yaml",
      "servers:\n  - name: docs\n    url: http://127.0.0.1:9/mcp\n" +
        '    allowed_gitlab_groups: ["crew:admin"]\n',
    );
    const goodPolicy = await writeFile(dir, "good.json", {
      rules: [{ tools: ["x"], allow: { groups: ["crew:editor"] } }],
    });
    (await forgeApp({
      ALLOWED_GITLAB_GROUPS: "crew:viewer",
      MCP_POLICY_FILE: goodPolicy,
      MCP_SERVERS_FILE: good,
    })).close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("provider roles: the gateway's policy decides by the provider's roles; a reload naming a GitLab role keeps it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "provider-roles-" });
  const mcp = startScripted(async (request) => {
    const { id, params } = await request.json();
    return Response.json({ jsonrpc: "2.0", id, result: { content: [{ text: params?.name }] } });
  });
  const policyPath = await writeFile(dir, "policy.json", {
    default: "deny",
    rules: [{ tools: ["deploy"], allow: { groups: ["crew:admin"] } }],
  });
  const serversYaml = (role: string) =>
    `servers:\n  - name: docs\n    url: ${mcp.url}\n    allowed_gitlab_groups: ["crew:${role}"]\n`;
  const serversPath = await writeFile(dir, "servers.yaml", serversYaml("editor"));
  try {
    for (const [level, expected] of [[20, false], [30, true]] as const) {
      const t = await forgeApp({
        MCP_UPSTREAM_URL: mcp.url,
        MCP_POLICY_FILE: policyPath,
        MCP_SERVERS_FILE: serversPath,
      });
      const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
      try {
        t.upstream.groupLevels = { crew: level };
        const { access_token } = await issueTokens(t);
        const before = mcp.requests.length;
        const response = await fetch(`http://127.0.0.1:${server.addr.port}/mcp`, {
          method: "POST",
          headers: {
            Authorization: `Bearer ${access_token}`,
            "Content-Type": "application/json",
            Accept: "application/json, text/event-stream",
          },
          body: JSON.stringify({
            jsonrpc: "2.0",
            id: 1,
            method: "tools/call",
            params: { name: "deploy", arguments: {} },
          }),
        });
        await response.body?.cancel();
        assert.equal(mcp.requests.length > before, expected, `crew level ${level}`);
        if (!expected) continue;
        // Reloads naming a GitLab role are refused in one line each; what is in force stays.
        await writeFile(dir, "policy.json", {
          default: "deny",
          rules: [{ tools: ["deploy"], allow: { groups: ["crew:developer"] } }],
        });
        await writeFile(dir, "servers.yaml", serversYaml("maintainer"));
        const lines: string[] = [];
        const followed = followConfigFiles(t.deps, {
          ...silentLogger,
          error: (message: string) => lines.push(message),
        }, {});
        followed.reload();
        followed.stop();
        assert.equal(lines.length, 2, lines.join("\n"));
        assert.match(
          lines[0],
          /^MCP_POLICY_FILE not reloaded, the policy in force stays: .*policy\.json: rule 0 "allow" "groups": unknown role "developer" in "crew:developer"; roles: viewer, editor, admin$/,
        );
        assert.match(
          lines[1],
          /^MCP_SERVERS_FILE not reloaded, the servers in force stay: .*servers\.yaml: server docs allowed_gitlab_groups: unknown role "maintainer" in "crew:maintainer"; roles: viewer, editor, admin$/,
        );
        assert.deepEqual(t.deps.callPolicy.current()?.rules[0].accounts.groups, [
          { path: "crew", minRole: "admin" },
        ]);
        assert.deepEqual(t.deps.servers.named("docs")?.entry?.lists?.groups, [
          { path: "crew", minRole: "editor" },
        ]);
      } finally {
        await server.shutdown();
        t.close();
      }
    }
  } finally {
    await mcp.close();
    await Deno.remove(dir, { recursive: true });
  }
});
