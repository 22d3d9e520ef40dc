/** Running the service: graceful shutdown, the demo, structured logs. */

import assert from "node:assert/strict";
import {
  demoRunArgs,
  postMcpOverHttp,
  signInOverHttp,
  spawnService,
  spawnWithGitLab,
  waitFor,
} from "./_service.ts";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { startService } from "../main.ts";
import { createLogger } from "../src/logger.ts";
import { IDLE_CONNECTION_MS } from "../src/gateway/mcp_client/node_http_client.ts";
import { TEST_SECRET } from "./_helpers.ts";

Deno.test("SIGTERM: a request in flight finishes, then the process exits 0", async () => {
  const { gitlab, service, close } = await spawnWithGitLab("ops-app", {
    UPSTREAM_TIMEOUT_MS: "1500",
  });
  try {
    // GitLab hangs on the device start: the request is in flight until the upstream timeout.
    gitlab.failNext("authorize_device", "timeout");
    const inFlight = fetch(
      `${service.url}/authorize?response_type=code&client_id=c&code_challenge=x&code_challenge_method=S256`,
    );
    await waitFor(() => gitlab.calls.authorizeDevice === 1);
    const exited = service.stop();
    const response = await inFlight;
    assert.equal(response.status, 500);
    assert.equal((await response.json()).error_description, "Failed to initiate authentication");
    assert.equal(await exited, 0);
    assert.ok(service.logs.some((line) => line.includes('"shutting down"')));
  } finally {
    await close();
  }
});

Deno.test("SIGTERM: connections kept open to the MCP server do not hold the process", async () => {
  const mcp = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json({ jsonrpc: "2.0", id: 1, result: {} }),
  );
  const { gitlab, service, close } = await spawnWithGitLab("ops-gateway-app", {
    MCP_UPSTREAM_URL: `http://127.0.0.1:${mcp.addr.port}/mcp`,
  });
  try {
    const { access_token } = await signInOverHttp(service.url, gitlab);
    for (let i = 0; i < 3; i++) {
      const answer = await postMcpOverHttp(service.url, access_token, { method: "tools/list" });
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
    }
    // The pooled connection to the MCP server is still open (idle for under a second).
    assert.equal(await service.stop(), 0);
  } finally {
    await close();
    await mcp.shutdown();
  }
});

/**
 * An MCP server on a raw socket, answering each request on a kept-alive connection; `closed`
 * resolves with the time the gateway's side of its first connection closed.
 */
function keepAliveMcpServer() {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { promise: closed, resolve } = Promise.withResolvers<number>();
  const body = '{"jsonrpc":"2.0","id":1,"result":{}}';
  const answer = new TextEncoder().encode(
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" +
      `Content-Length: ${body.length}\r\nConnection: keep-alive\r\n\r\n${body}`,
  );
  const serving = (async () => {
    const conn = await listener.accept();
    const buffer = new Uint8Array(64 * 1024);
    while (await conn.read(buffer).catch(() => null) !== null) await conn.write(answer);
    resolve(performance.now());
    conn.close();
  })();
  return {
    url: `http://127.0.0.1:${listener.addr.port}/mcp`,
    closed,
    async close() {
      listener.close();
      await serving;
    },
  };
}

Deno.test("shutdown: the service closes its connections to the MCP server, as it closes the store", async () => {
  const mcp = keepAliveMcpServer();
  const gitlab = startSimulatedGitLab();
  const service = await startService({
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "ops-shutdown-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
    PORT: "0",
    HOST: "127.0.0.1",
    MCP_UPSTREAM_URL: mcp.url,
  }, createLogger(() => {}));
  try {
    const { access_token } = await signInOverHttp(service.url, gitlab);
    const answer = await postMcpOverHttp(service.url, access_token, { method: "tools/list" });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const answered = performance.now();
    await service.shutdown();
    // Left alone, the pooled connection would close only once idle for IDLE_CONNECTION_MS.
    assert.ok((await mcp.closed) - answered < IDLE_CONNECTION_MS / 2, "closed at shutdown");
  } finally {
    await service.shutdown();
    await gitlab.close();
    await mcp.close();
  }
});

Deno.test("logs are JSON lines with a request id per request", async () => {
  const service = await spawnService({ KV_PATH: ":memory:" });
  try {
    const response = await fetch(`${service.url}/healthz`);
    await response.body?.cancel();
    const requestId = response.headers.get("x-request-id");
    assert.ok(requestId);
    await waitFor(() => service.logs.some((line) => line.includes(requestId)));
    for (const line of service.logs) JSON.parse(line);
    const entry = JSON.parse(service.logs.find((line) => line.includes(requestId))!);
    assert.equal(entry.message, "request");
    assert.equal(entry.path, "/healthz");
    assert.equal(entry.status, 200);
  } finally {
    await service.stop();
  }
});

Deno.test("deno task demo: prints a client URL that starts a sign-in at the service", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: demoRunArgs(["-A"]),
    env: { PORT: "0" },
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  try {
    let output = "";
    while (!/example client: +\S+/.test(output)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`demo exited early:\n${output}`);
      output += value;
    }
    const clientUrl = output.match(/example client: +(\S+)/)![1];
    const start = await fetch(clientUrl, { redirect: "manual" });
    assert.equal(start.status, 302);
    const authorize = new URL(start.headers.get("location")!);
    assert.equal(authorize.pathname, "/authorize");
    assert.equal(authorize.searchParams.get("code_challenge_method"), "S256");
    const page = await fetch(authorize);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /Sign in with GitLab/);
  } finally {
    child.kill("SIGTERM");
    await reader.cancel();
    await child.status;
  }
});
