/** Running the service: graceful shutdown, the demo, structured logs. */

import assert from "node:assert/strict";
import {
  demoRunArgs,
  denoServeArgs,
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

Deno.test("SIGTERM: open GET and listen streams end, a call's stream finishes, and the process exits 0", async (t) => {
  for (const args of [undefined, denoServeArgs()]) {
    await t.step(args ? "deno serve" : "deno run main.ts start", async () => {
      const mcp = streamingMcpServer();
      const { gitlab, service, close } = await spawnWithGitLab("ops-streams-app", {
        MCP_UPSTREAM_URL: mcp.url,
      }, args);
      try {
        const { access_token } = await signInOverHttp(service.url, gitlab);
        const headers = {
          Authorization: `Bearer ${access_token}`,
          "MCP-Protocol-Version": "2025-06-18",
        };
        // The standalone stream: the MCP server never ends it.
        const get = await fetch(`${service.url}/mcp`, {
          headers: { ...headers, Accept: "text/event-stream" },
        });
        assert.equal(get.status, 200);
        const standalone = get.body!.getReader();
        assert.match(UTF8.decode((await standalone.read()).value), /: open/);
        // 2026-07-28's listen stream, a POST the MCP server holds open as long.
        const listen = await fetch(`${service.url}/mcp`, {
          method: "POST",
          headers: {
            ...headers,
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "subscriptions/listen",
            Accept: "application/json, text/event-stream",
            "Content-Type": "application/json",
          },
          body: JSON.stringify({
            jsonrpc: "2.0",
            id: 3,
            method: "subscriptions/listen",
            params: {},
          }),
        });
        assert.equal(listen.status, 200);
        const listening = listen.body!.getReader();
        assert.match(UTF8.decode((await listening.read()).value), /: open/);
        // A tool call answered as a stream, still running at the SIGTERM.
        const post = await fetch(`${service.url}/mcp`, {
          method: "POST",
          headers: {
            ...headers,
            Accept: "application/json, text/event-stream",
            "Content-Type": "application/json",
          },
          body: JSON.stringify({
            jsonrpc: "2.0",
            id: 7,
            method: "tools/call",
            params: { name: "slow" },
          }),
        });
        const call = post.body!.getReader();
        assert.match(UTF8.decode((await call.read()).value), /progress/);
        const exited = service.stop();
        // The GET stream ends at once; the call is still answered, then the process exits.
        assert.equal((await standalone.read()).done, true, "the GET stream ended");
        assert.equal((await listening.read()).done, true, "the listen stream ended");
        mcp.finishCalls();
        let rest = "";
        for (let r = await call.read(); !r.done; r = await call.read()) {
          rest += UTF8.decode(r.value);
        }
        assert.match(rest, /"id":7,"result"/);
        assert.equal(await exited, 0);
      } finally {
        await close();
        await mcp.close();
      }
    });
  }
});

const UTF8 = new TextDecoder();

/**
 * An MCP server whose GET and listen streams stay open for ever and whose tool call streams a
 * progress event, then its answer once `finishCalls` is called.
 */
function streamingMcpServer() {
  const encoder = new TextEncoder();
  const { promise: callsFinish, resolve: finishCalls } = Promise.withResolvers<void>();
  const open = new Set<ReadableStreamDefaultController<Uint8Array>>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const sse = { "Content-Type": "text/event-stream" };
    const message = request.method === "POST" ? await request.json() : undefined;
    if (request.method === "GET" || message.method === "subscriptions/listen") {
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          open.add(c);
          c.enqueue(encoder.encode(": open\n\n"));
        },
        cancel() {},
      });
      return new Response(body, { headers: sse });
    }
    const body = new ReadableStream<Uint8Array>({
      async start(c) {
        c.enqueue(encoder.encode(
          'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}\n\n',
        ));
        await callsFinish;
        c.enqueue(encoder.encode('data: {"jsonrpc":"2.0","id":7,"result":{"content":[]}}\n\n'));
        c.close();
      },
    });
    return new Response(body, { headers: sse });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    finishCalls: () => finishCalls(),
    async close() {
      finishCalls();
      for (const c of open) {
        try {
          c.close();
        } catch { /* already closed */ }
      }
      await server.shutdown();
    },
  };
}

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
