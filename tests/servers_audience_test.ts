/**
 * Each MCP server of MCP_SERVERS_FILE is its own audience (RFC 8707; docs/gateway.md "Several MCP
 * servers"): over real HTTP, with scripted MCP servers at `/mcp` and `/mcp/docs` that show what
 * reached them. A token that names no resource (signed before resource indicators, or by a
 * replica of an older version sharing the key) is valid at `/mcp` only, as the docs say: at a
 * named server it is refused and the user's GitLab token never reaches that server. And
 * `/authorize` takes `resource=` sent without a value as omitted (RFC 6749 §3.1), as `/token`
 * and `/device_authorization` do: the sign-in is for `/mcp`, not refused `invalid_target`.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import type { AccessTokenClaims } from "../src/jwt.ts";
import {
  authorizeQuery,
  exchange,
  flowDataFromPage,
  issueTokens,
  makeTestApp,
  poll,
  TEST_BASE,
  type TestApp,
} from "./_helpers.ts";
import { echo, type ScriptedUpstream, startScripted } from "./_gateway.ts";
import { mcpPostInit } from "./_service.ts";

interface Served {
  t: TestApp;
  url: string;
  main: ScriptedUpstream;
  docs: ScriptedUpstream;
}

/** The service over HTTP with an echoing MCP server at /mcp and another at /mcp/docs. */
async function withServers(fn: (s: Served) => Promise<void>): Promise<void> {
  const main = startScripted(echo);
  const docs = startScripted(echo);
  const dir = await Deno.makeTempDir();
  const file = `${dir}/servers.yaml`;
  await Deno.writeTextFile(file, `servers:\n  - name: docs\n    url: ${docs.url}\n`);
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: main.url, MCP_SERVERS_FILE: file } });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  try {
    await fn({ t, url: `http://127.0.0.1:${server.addr.port}`, main, docs });
  } finally {
    await server.shutdown();
    t.close();
    await main.close();
    await docs.close();
    await Deno.remove(dir, { recursive: true });
  }
}

async function post(url: string, token: string): Promise<Response> {
  return await fetch(url, mcpPostInit(token));
}

/** The claims of `token` signed again without a `resource` claim, as an older version signs. */
async function withoutResource(t: TestApp, token: string): Promise<string> {
  const { resource: _dropped, iat: _iat, exp: _exp, ...claims } = decodeJwt(token);
  return await t.deps.oauth!.signer.sign(
    claims as unknown as AccessTokenClaims,
    t.clock.now(),
    t.config.accessTokenTtlSeconds,
  );
}

Deno.test("servers audience: a token naming no resource is good at /mcp only, never at a named server", () =>
  withServers(async ({ t, url, main, docs }) => {
    const { access_token } = await issueTokens(t);
    const unbound = await withoutResource(t, access_token);
    assert.equal(decodeJwt(unbound).resource, undefined);

    const atMain = await post(`${url}/mcp`, unbound);
    assert.equal(atMain.status, 200, "valid at /mcp, as before resource indicators");
    assert.match((await atMain.json()).authorization, /^Bearer gl-access/);
    assert.equal(main.requests.length, 1);

    const atDocs = await post(`${url}/mcp/docs`, unbound);
    const body = await atDocs.json();
    assert.equal(atDocs.status, 401, JSON.stringify(body));
    assert.equal(body.error, "invalid_token");
    assert.match(
      atDocs.headers.get("www-authenticate") ?? "",
      /error="invalid_token".*resource_metadata="http:\/\/auth\.test\/\.well-known\/oauth-protected-resource\/mcp\/docs"/,
    );
    assert.equal(docs.requests.length, 0, "the GitLab token reached another server");
  }));

Deno.test("servers audience: /authorize takes resource= without a value as omitted: a sign-in for /mcp", () =>
  withServers(async ({ t, url }) => {
    const page = await fetch(`${url}/authorize?${authorizeQuery({ resource: "" })}`);
    const html = await page.text();
    assert.equal(page.status, 200, html);
    t.upstream.approve();
    const done = await (await poll(t, flowDataFromPage(html).flowState)).json();
    assert.equal(done.status, "complete", JSON.stringify(done));
    const tokens = await (await exchange(t, done.code, {})).json();
    assert.equal(decodeJwt(tokens.access_token).resource, `${TEST_BASE}/mcp`);

    const named = await fetch(`${url}/authorize?${authorizeQuery({ resource: "http://other/" })}`);
    assert.equal(named.status, 400, "a resource with a value is still checked");
    assert.equal((await named.json()).error, "invalid_target");
  }));
