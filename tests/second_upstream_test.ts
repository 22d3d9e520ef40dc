/**
 * The upstream seam, proven: a second provider ("Forge", tests/_generic_upstream.ts, built from
 * src/upstream/oauth_http.ts alone) signs a user in end to end through the real app over HTTP,
 * and every message and document that names the provider names Forge.
 *
 * Forge is the simulated GitLab behind other paths, with GitHub's habits: its token endpoint
 * answers errors with HTTP 200 (the `errorsWithStatus200` quirk) and its user API calls the
 * username `login`.
 */

import assert from "node:assert/strict";
import { type SimulatedGitLab, startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { loadConfig } from "../src/app/config.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { createApp } from "../src/app/app.ts";
import { createLogger } from "../src/logger.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { forgeProvider } from "./_generic_upstream.ts";
import { FakeClock, TEST_SECRET } from "./_helpers.ts";
import {
  assertFlowComplete,
  authorizeOverHttp,
  exchangeOverHttp,
  fetchJson,
  type HttpResult,
  pollOverHttp,
  postToken,
} from "./_service.ts";

/** Forge's paths, and where the simulated GitLab serves each. */
const FORGE_ROUTES: Record<string, string> = {
  "/login/device/code": "/oauth/authorize_device",
  "/login/oauth/authorize": "/oauth/authorize",
  "/login/oauth/access_token": "/oauth/token",
  "/login/oauth/revoke": "/oauth/revoke",
  "/api/user": "/api/v4/user",
};

interface Forge {
  url: URL;
  /** Token endpoint errors Forge answered with HTTP 200. */
  errorsAnsweredWith200: string[];
  close(): Promise<void>;
}

/** Forge on loopback, in front of `gitlab`. */
function startForge(gitlab: SimulatedGitLab): Forge {
  const errorsAnsweredWith200: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const { pathname } = new URL(request.url);
    const target = FORGE_ROUTES[pathname];
    if (!target) {
      await request.body?.cancel();
      return Response.json({ message: "Not Found" }, { status: 404 });
    }
    const answer = await fetch(new URL(target, gitlab.url), {
      method: request.method,
      headers: request.headers,
      body: request.method === "GET" ? undefined : await request.arrayBuffer(),
      redirect: "manual",
    });
    const text = await answer.text();
    const json = parseJson(text);
    if (pathname === "/login/oauth/access_token" && typeof json?.error === "string") {
      errorsAnsweredWith200.push(json.error);
      return Response.json(json, { status: 200 });
    }
    if (pathname === "/api/user" && answer.status === 200 && json) {
      const { username, ...rest } = json;
      return Response.json({ ...rest, login: username });
    }
    return new Response(text, { status: answer.status, headers: answer.headers });
  });
  return {
    url: new URL(`http://127.0.0.1:${server.addr.port}/`),
    errorsAnsweredWith200,
    close: () => server.shutdown(),
  };
}

function parseJson(text: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The real app with Forge as its upstream, served on loopback in gateway mode. */
interface ForgeSetup {
  gitlab: SimulatedGitLab;
  forge: Forge;
  serviceUrl: string;
  clock: FakeClock;
  logs: string[];
  /** Authorization headers the MCP server received. */
  mcpAuthorizations: (string | null)[];
}

async function withForge(fn: (s: ForgeSetup) => Promise<void>): Promise<void> {
  const gitlab = startSimulatedGitLab();
  const forge = startForge(gitlab);
  const mcpAuthorizations: (string | null)[] = [];
  const mcp = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    mcpAuthorizations.push(request.headers.get("authorization"));
    await request.body?.cancel();
    return Response.json({ jsonrpc: "2.0", id: 1, result: {} });
  });
  const config = loadConfig({
    UPSTREAM_PROVIDER: "forge",
    GITLAB_URL: forge.url.href,
    GITLAB_SCOPES: "read_user",
    GITLAB_CLIENT_ID: "forge-app",
    JWT_SECRET: TEST_SECRET,
    MCP_UPSTREAM_URL: `http://127.0.0.1:${mcp.addr.port}/mcp`,
    // Our tokens outlive Forge's (two hours), so the guard has Forge's to renew.
    ACCESS_TOKEN_TTL: String(86_400),
  });
  const forgeDescription = forgeProvider({
    deviceAuthorization: "login/device/code",
    authorize: "login/oauth/authorize",
    token: "login/oauth/access_token",
    user: "api/user",
    revoke: "login/oauth/revoke",
  }, { errorsWithStatus200: true });
  const kv = await Deno.openKv(":memory:");
  const logs: string[] = [];
  const clock = new FakeClock(Date.now());
  const deps = createAppDeps(config, {
    kv,
    clock,
    logger: createLogger((line) => logs.push(line)),
    templates: await loadTemplates(),
    providers: { forge: forgeDescription },
  });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    createApp(deps),
  );
  try {
    await fn({
      gitlab,
      forge,
      serviceUrl: `http://127.0.0.1:${server.addr.port}`,
      clock,
      logs,
      mcpAuthorizations,
    });
  } finally {
    await server.shutdown();
    kv.close();
    await mcp.shutdown();
    await forge.close();
    await gitlab.close();
  }
}

/** Waits out the device flow's polling interval on the app's clock. */
async function pollAfterInterval(s: ForgeSetup, flowState: string): Promise<HttpResult> {
  s.clock.advance(6_000);
  return await pollOverHttp(s.serviceUrl, flowState);
}

function callMcp(serviceUrl: string, accessToken: string): Promise<Response> {
  return fetch(`${serviceUrl}/mcp`, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${accessToken}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
  });
}

Deno.test("second upstream: Forge signs a user in end to end over HTTP; the gateway sends Forge's token", () =>
  withForge(async (s) => {
    const { flowState } = await authorizeOverHttp(s.serviceUrl);
    assert.equal(s.gitlab.calls.authorizeDevice, 1, "the device flow started at Forge");

    // Forge answers "pending" with HTTP 200; the quirk reads it as pending, not as a token.
    assert.deepEqual((await pollAfterInterval(s, flowState)).body, { status: "pending" });
    assert.deepEqual(s.forge.errorsAnsweredWith200, ["authorization_pending"]);

    s.gitlab.approve(s.gitlab.lastUserCode() ?? "");
    const done = await pollAfterInterval(s, flowState);
    assertFlowComplete(done);
    const tokens = await exchangeOverHttp(s.serviceUrl, done.body.code);
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
    const claims = JSON.parse(atob(tokens.body.access_token.split(".")[1]));
    assert.equal(claims.gitlab_user, "ada", "the user came from Forge's `login`");

    const response = await callMcp(s.serviceUrl, tokens.body.access_token);
    assert.equal(response.status, 200, await response.clone().text());
    await response.body?.cancel();
    const forwarded = s.mcpAuthorizations.at(-1) ?? "";
    assert.match(forwarded, /^Bearer /);
    assert.notEqual(forwarded, `Bearer ${tokens.body.access_token}`);
    const me = await fetchJson(`${s.forge.url}api/user`, { headers: { Authorization: forwarded } });
    assert.deepEqual([me.status, me.body.login], [200, "ada"], "the MCP server got Forge's token");

    const refreshed = await postToken(s.serviceUrl, {
      grant_type: "refresh_token",
      refresh_token: tokens.body.refresh_token,
    });
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
  }));

Deno.test("second upstream: a denial at Forge, answered with HTTP 200, ends the flow", () =>
  withForge(async (s) => {
    const { flowState } = await authorizeOverHttp(s.serviceUrl);
    s.gitlab.deny(s.gitlab.lastUserCode() ?? "");
    const polled = await pollAfterInterval(s, flowState);
    assert.deepEqual(s.forge.errorsAnsweredWith200, ["access_denied"]);
    assert.deepEqual(polled, { status: 200, body: { status: "failed", error: "access_denied" } });
  }));

Deno.test("second upstream: metadata and the guard's messages name Forge", () =>
  withForge(async (s) => {
    const prm = await fetchJson(`${s.serviceUrl}/.well-known/oauth-protected-resource`);
    assert.equal(prm.body.resource_name, "MCP server (sign in with Forge)");

    const { flowState } = await authorizeOverHttp(s.serviceUrl);
    s.gitlab.approve(s.gitlab.lastUserCode() ?? "");
    const done = await pollAfterInterval(s, flowState);
    assertFlowComplete(done);
    const tokens = await exchangeOverHttp(s.serviceUrl, done.body.code);
    const accessToken = tokens.body.access_token;
    const first = await callMcp(s.serviceUrl, accessToken);
    await first.body?.cancel();
    const forgeToken = (s.mcpAuthorizations.at(-1) ?? "").replace(/^Bearer /, "");

    // Forge withdraws the grant; when its token is due for renewal, Forge refuses for good.
    s.gitlab.revoke(forgeToken);
    s.clock.advance(2 * 3600 * 1000);
    const refused = await callMcp(s.serviceUrl, accessToken);
    await refused.body?.cancel();
    assert.equal(refused.status, 401);
    assert.match(
      refused.headers.get("www-authenticate") ?? "",
      /error_description="Forge no longer accepts this sign-in; sign in again"/,
    );
    assert.ok(
      s.logs.some((line) => JSON.parse(line).message === "Forge token refresh failed"),
      s.logs.join("\n"),
    );
    assert.ok(!s.logs.some((line) => line.includes("GitLab")), "no line names GitLab");
  }));
