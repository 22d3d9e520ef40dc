/**
 * A server's own lists (issue 35 §2, `allowed_gitlab_groups` and `allowed_gitlab_users` in
 * MCP_SERVERS_FILE): they narrow the service-wide lists for tokens of that server only. A user
 * needs the service-wide lists (when set) and the server's (when set), either of the server's
 * lists admitting; checked when the sign-in completes, again on refresh and by the gateway once
 * the decision is due; a refused user reads why. Over real HTTP with the MCP SDK v1 at `/mcp`
 * and v2 (2026-07-28) at `/mcp/docs`.
 */

import assert from "node:assert/strict";
import {
  exchange,
  issueTokens,
  makeTestApp,
  poll,
  redirectSignIn,
  refresh,
  startFlow,
  TEST_BASE,
  type TestApp,
} from "./_helpers.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import { NOTE_TEXT, startMcpV2Upstream } from "./_mcp_v2_upstream.ts";
import { v1Whoami, v2ReadsNote } from "./_servers_clients.ts";

const DOCS = `${TEST_BASE}/mcp/docs`;

interface Setup {
  t: TestApp;
  url: string;
}

async function withLists(
  lists: string,
  env: Record<string, string>,
  fn: (s: Setup) => Promise<void>,
): Promise<void> {
  const v1 = startMcpUpstream();
  const v2 = startMcpV2Upstream();
  const dir = await Deno.makeTempDir({ prefix: "servers-lists-" });
  await Deno.writeTextFile(
    `${dir}/servers.yaml`,
    `servers:\n  - name: docs\n    url: ${v2.url}\n${lists}`,
  );
  const t = await makeTestApp({
    env: {
      MCP_UPSTREAM_URL: v1.url,
      MCP_SERVERS_FILE: `${dir}/servers.yaml`,
      GITLAB_SCOPES: "read_user read_api",
      ...env,
    },
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  try {
    await fn({ t, url: `http://127.0.0.1:${server.addr.port}` });
  } finally {
    await server.shutdown();
    t.close();
    await v1.close();
    await v2.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** A device sign-in for `resource`: the poll's answer, and the token response if it completed. */
async function signIn(t: TestApp, resource: string) {
  const flowState = await startFlow(t, { resource });
  t.upstream.approve();
  const body = await (await poll(t, flowState)).json();
  if (body.status !== "complete") return { body, tokens: undefined };
  const response = await exchange(t, body.code, { resource });
  assert.equal(response.status, 200, await response.clone().text());
  return { body, tokens: await response.json() };
}

const GROUP_LIST = "    allowed_gitlab_groups: [acme/docs:reporter]\n";

Deno.test("a server's group list: a non-member is refused there (and told why) and admitted at /mcp; a member reads", () =>
  withLists(GROUP_LIST, {}, async ({ t, url }) => {
    const refused = await signIn(t, DOCS);
    assert.equal(refused.body.status, "failed", JSON.stringify(refused.body));
    assert.match(refused.body.error, /@ada is not allowed/);
    assert.match(refused.body.error, /members of certain groups/);

    const main = await issueTokens(t);
    assert.match(await v1Whoami(`${url}/mcp`, main.access_token), /gl-access/);

    t.upstream.groupLevels = { "acme/docs": 10 };
    assert.equal((await signIn(t, DOCS)).body.status, "failed", "a guest is below reporter");
    t.upstream.groupLevels = { "acme/docs": 20 };
    const admitted = await signIn(t, DOCS);
    assert.ok(admitted.tokens, JSON.stringify(admitted.body));
    assert.equal(await v2ReadsNote(`${url}/mcp/docs`, admitted.tokens.access_token), NOTE_TEXT);
  }));

Deno.test("a server's group list in the redirect sign-in: our refusal page there, a code at /mcp", () =>
  withLists(
    GROUP_LIST,
    { GITLAB_SIGN_IN: "redirect", GITLAB_CLIENT_SECRET: "gl-secret" },
    async ({ t }) => {
      const refused = await redirectSignIn(t, { resource: DOCS });
      assert.equal(refused.status, 403);
      assert.equal(refused.headers.get("location"), null);
      const html = await refused.text();
      assert.match(html, /@ada is not allowed/);
      const back = /id="return-link" href="([^"]+)"/.exec(html)?.[1]?.replaceAll("&amp;", "&");
      assert.equal(new URL(back ?? "x:").searchParams.get("error"), "access_denied", html);

      const admitted = await redirectSignIn(t, { resource: `${TEST_BASE}/mcp` });
      const location = new URL(admitted.headers.get("location") ?? "x:");
      assert.ok(location.searchParams.get("code"), location.href);

      t.upstream.groupLevels = { "acme/docs": 20 };
      const member = await redirectSignIn(t, { resource: DOCS });
      assert.ok(new URL(member.headers.get("location") ?? "x:").searchParams.get("code"));
    },
  ));

Deno.test("a server's user list admits by username or id:<n>; either list of the entry admits", () =>
  withLists(
    `${GROUP_LIST}    allowed_gitlab_users: ["id:4242"]\n`,
    {},
    async ({ t, url }) => {
      const admitted = await signIn(t, DOCS);
      assert.ok(admitted.tokens, JSON.stringify(admitted.body));
      assert.equal(
        await v2ReadsNote(`${url}/mcp/docs`, admitted.tokens.access_token),
        NOTE_TEXT,
      );
    },
  ));

Deno.test("a server's lists narrow the service-wide ones: both must admit", () =>
  withLists(GROUP_LIST, { ALLOWED_GITLAB_USERS: "ada" }, async ({ t }) => {
    // The service-wide list admits ada; docs' does not.
    assert.equal((await signIn(t, DOCS)).body.status, "failed");
    assert.ok((await signIn(t, `${TEST_BASE}/mcp`)).tokens, "admitted at /mcp");
    t.upstream.groupLevels = { "acme/docs": 30 };
    assert.ok((await signIn(t, DOCS)).tokens, "both admit");
  }));

Deno.test("a server's lists are asked again on refresh and at the gateway once due", () =>
  withLists(GROUP_LIST, {}, async ({ t, url }) => {
    t.upstream.groupLevels = { "acme/docs": 20 };
    const first = await signIn(t, DOCS);
    const second = await signIn(t, DOCS);
    assert.ok(first.tokens && second.tokens);

    t.upstream.groupLevels = {};
    t.clock.advance((t.config.access.recheckSeconds + 1) * 1000);
    const refreshed = await refresh(t, first.tokens.refresh_token);
    assert.equal(refreshed.status, 400);
    assert.equal((await refreshed.json()).error, "invalid_grant");

    const response = await fetch(`${url}/mcp/docs`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${second.tokens.access_token}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
    });
    await response.body?.cancel();
    assert.equal(response.status, 401);
    assert.match(response.headers.get("www-authenticate") ?? "", /no longer allowed/);
  }));
