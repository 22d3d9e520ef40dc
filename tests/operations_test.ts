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
