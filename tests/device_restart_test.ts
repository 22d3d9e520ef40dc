/**
 * A device authorization survives restarts of the service (issue 36), on a KV file and on
 * PostgreSQL: after issuance, while the user's browser is at GitLab, and after approval before
 * the client redeemed it. The service runs as a process against the simulated GitLab (redirect
 * sign-in); the browser is plain HTTP with a cookie jar; the token then calls a tool of an SDK
 * MCP server through the gateway.
 */

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { CookieJar, TEST_SECRET } from "./_helpers.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";
import { decideAtGitLab, type ServiceProcess, spawnService } from "./_service.ts";

/** Follows nothing: each step's answer is looked at. */
async function visit(jar: CookieJar, url: string | URL, init: RequestInit = {}) {
  const response = await fetch(url, {
    ...init,
    headers: { ...jar.headers(), ...init.headers },
    redirect: "manual",
  });
  jar.store(response);
  return response;
}

function formOf(html: string): Record<string, string> {
  const device = html.match(/name="device" value="([^"]+)"/)?.[1];
  const csrf = html.match(/name="csrf_token" value="([^"]+)"/)?.[1];
  assert.ok(device && csrf, html);
  return { device, csrf_token: csrf };
}

function postForm(jar: CookieJar, url: string, form: Record<string, string>) {
  return visit(jar, url, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form),
  });
}

async function restartsThroughout(store: Record<string, string>): Promise<void> {
  const gitlab = startSimulatedGitLab();
  const mcp = startMcpUpstream();
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = String(listener.addr.port);
  listener.close();
  const base = `http://127.0.0.1:${port}`;
  const env = {
    ...store,
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "device-restart-app",
    GITLAB_CLIENT_SECRET: "device-restart-secret",
    GITLAB_SIGN_IN: "redirect",
    JWT_SECRET: TEST_SECRET,
    PORT: port,
    BASE_URL: base,
    MCP_UPSTREAM_URL: mcp.url,
  };
  let service: ServiceProcess = await spawnService(env);
  const restart = async () => {
    assert.equal(await service.stop(), 0);
    service = await spawnService(env);
  };
  try {
    const registered = await (await fetch(`${base}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_name: "agent", grant_types: [DEVICE_CODE_GRANT_TYPE] }),
    })).json();
    const started = await (await fetch(`${base}/device_authorization`, {
      method: "POST",
      body: new URLSearchParams({ client_id: registered.client_id }),
    })).json();

    await restart(); // after issuance
    const jar = new CookieJar();
    const entered = await visit(jar, started.verification_uri_complete);
    const page = await entered.text();
    assert.equal(entered.status, 200, page);
    const toGitLab = await postForm(jar, `${base}/device`, { ...formOf(page), action: "continue" });
    assert.equal(toGitLab.status, 302, await toGitLab.text());

    await restart(); // while the browser is at GitLab
    const back = await decideAtGitLab(new URL(toGitLab.headers.get("location")!), "approve");
    const asked = await visit(jar, back);
    const approvePage = await asked.text();
    assert.equal(asked.status, 200, approvePage);
    const approved = await postForm(jar, `${base}/device`, {
      ...formOf(approvePage),
      action: "approve",
    });
    assert.equal(approved.status, 200, await approved.text());

    await restart(); // after approval, before redemption
    const issued = await fetch(`${base}/token`, {
      method: "POST",
      body: new URLSearchParams({
        grant_type: DEVICE_CODE_GRANT_TYPE,
        device_code: started.device_code,
        client_id: registered.client_id,
      }),
    });
    const tokens = await issued.json();
    assert.equal(issued.status, 200, JSON.stringify(tokens));

    const client = new Client({ name: "device-restart-test", version: "1.0.0" });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${tokens.access_token}` } },
      }),
    );
    try {
      const result = await client.callTool({ name: "whoami", arguments: {} });
      assert.equal(result.isError ?? false, false, JSON.stringify(result));
    } finally {
      await client.close();
    }
  } finally {
    await service.stop();
    await mcp.close();
    await gitlab.close();
  }
}

Deno.test("device authorization: restarts after issuance, at GitLab and after approval (KV file)", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await restartsThroughout({ KV_PATH: `${dir}/kv.sqlite3` });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "device authorization: restarts after issuance, at GitLab and after approval (PostgreSQL)",
  ignore: ignorePostgresTests,
  async fn() {
    const url = await (await sharedPostgres()).createDatabase();
    await restartsThroughout({ DATABASE_URL: url });
  },
});
