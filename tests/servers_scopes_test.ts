/**
 * A server's own GitLab scopes (issue 35 §2, `gitlab_scopes` in MCP_SERVERS_FILE): the sign-in
 * for that server asks GitLab for those scopes only, its pages list them, and the GitLab token
 * its MCP server receives is that sign-in's; a server without them asks for GITLAB_SCOPES. Over
 * real HTTP with the MCP SDK v1 at `/mcp/docs` and v2 (2026-07-28) at `/mcp/tools`.
 */

import assert from "node:assert/strict";
import {
  authorize,
  consentFormOf,
  CookieJar,
  exchange,
  flowDataFromPage,
  makeTestApp,
  poll,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import { NOTE_TEXT, startMcpV2Upstream } from "./_mcp_v2_upstream.ts";
import { GITLAB_SCOPE_WORDS } from "../src/upstream/gitlab_scopes.ts";
import { loadConfig } from "../src/app/config.ts";
import { v1Whoami, v2ReadsNote } from "./_servers_clients.ts";

const DOCS = `${TEST_BASE}/mcp/docs`;
const TOOLS = `${TEST_BASE}/mcp/tools`;

async function withServers(
  env: Record<string, string>,
  fn: (t: TestApp, url: string) => Promise<void>,
): Promise<void> {
  const v1 = startMcpUpstream();
  const v2 = startMcpV2Upstream();
  const dir = await Deno.makeTempDir({ prefix: "servers-scopes-" });
  await Deno.writeTextFile(
    `${dir}/servers.yaml`,
    `servers:\n  - name: docs\n    url: ${v1.url}\n    gitlab_scopes: [read_user]\n` +
      `  - name: tools\n    url: ${v2.url}\n`,
  );
  const t = await makeTestApp({
    env: {
      MCP_SERVERS_FILE: `${dir}/servers.yaml`,
      GITLAB_SCOPES: "read_user api",
      ...env,
    },
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  try {
    await fn(t, `http://127.0.0.1:${server.addr.port}`);
  } finally {
    await server.shutdown();
    t.close();
    await v1.close();
    await v2.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** A device sign-in for `resource` that GitLab approves with `gitlabToken`: our tokens. */
async function deviceSignIn(t: TestApp, resource: string, gitlabToken: string) {
  const page = await authorize(t, { resource });
  const html = await page.text();
  assert.equal(page.status, 200, html);
  const { flowState } = flowDataFromPage(html);
  t.upstream.approve({ accessToken: gitlabToken });
  const body = await (await poll(t, flowState)).json();
  assert.equal(body.status, "complete", JSON.stringify(body));
  const response = await exchange(t, body.code, { resource });
  assert.equal(response.status, 200, await response.clone().text());
  return { html, tokens: await response.json() };
}

Deno.test("gitlab_scopes: the device sign-in for a server asks GitLab for its scopes, its page lists them, its MCP server gets that sign-in's token", () =>
  withServers({}, async (t, url) => {
    const docs = await deviceSignIn(t, DOCS, "gl-docs-token");
    assert.deepEqual(t.upstream.scopesAsked, ["read_user"]);
    assert.ok(docs.html.includes(GITLAB_SCOPE_WORDS.read_user), "the page lists read_user");
    assert.ok(!docs.html.includes(GITLAB_SCOPE_WORDS.api), "and not api");
    const whoami = JSON.parse(await v1Whoami(`${url}/mcp/docs`, docs.tokens.access_token));
    assert.equal(whoami.authorization, "Bearer gl-docs-token");

    const tools = await deviceSignIn(t, TOOLS, "gl-tools-token");
    assert.deepEqual(t.upstream.scopesAsked, ["read_user", "read_user api"]);
    assert.ok(tools.html.includes(GITLAB_SCOPE_WORDS.api), "a server without its own: all");
    assert.equal(await v2ReadsNote(`${url}/mcp/tools`, tools.tokens.access_token), NOTE_TEXT);
  }));

Deno.test("gitlab_scopes: the redirect sign-in's consent page and GitLab's authorization URL carry the server's scopes", () =>
  withServers({ GITLAB_SIGN_IN: "redirect" }, async (t) => {
    for (const [resource, scopes] of [[DOCS, "read_user"], [TOOLS, "read_user api"]]) {
      const jar = new CookieJar();
      const page = await authorize(t, { resource }, { jar });
      const html = await page.text();
      assert.equal(page.status, 200, html);
      assert.ok(html.includes(GITLAB_SCOPE_WORDS.read_user));
      assert.equal(html.includes(GITLAB_SCOPE_WORDS.api), scopes.includes("api"), resource);
      const consent = await t.app(
        new Request(`${TEST_BASE}/oauth/consent`, {
          method: "POST",
          headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ ...consentFormOf(html), action: "continue" }),
        }),
      );
      assert.equal(consent.status, 302);
      const location = new URL(consent.headers.get("location")!);
      assert.equal(location.searchParams.get("scope"), scopes);
    }
    assert.deepEqual(t.upstream.scopesAsked, ["read_user", "read_user api"]);
  }));

Deno.test("gitlab_scopes: a server's scopes need read_api or api while sign-ins read group memberships; one line names the file, entry and field", async () => {
  const dir = await Deno.makeTempDir({ prefix: "servers-scopes-" });
  const path = `${dir}/servers.yaml`;
  const env = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET, MCP_SERVERS_FILE: path };
  try {
    await Deno.writeTextFile(
      path,
      "servers:\n  - name: docs\n    url: http://x/mcp\n    gitlab_scopes: [read_user]\n",
    );
    const config = loadConfig({ ...env, GITLAB_SCOPES: "read_user read_api" });
    assert.equal(config.mcpServersFile?.servers[0].gitlabScopes, "read_user");
    assert.throws(
      () =>
        loadConfig({ ...env, GITLAB_SCOPES: "read_user read_api", ALLOWED_GITLAB_GROUPS: "acme" }),
      (error: unknown) => {
        const message = String(error);
        assert.ok(
          message.startsWith(
            `ConfigError: MCP_SERVERS_FILE: ${path}: server docs gitlab_scopes: needs read_api or api`,
          ),
          message,
        );
        assert.ok(!message.includes("\n"), "one line");
        return true;
      },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
