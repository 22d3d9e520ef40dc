/**
 * Gateway mode: bodies in flight. Event streams and request bodies pass through as they come,
 * the MCP server's deadline covers its response headers only, and an unreachable server is a
 * 502.
 */

import assert from "node:assert/strict";
import { echo, gatewayApp, mcpRequest, startScripted } from "./_gateway.ts";

const encoder = new TextEncoder();

/** An event-stream response whose events `produce` sends, closed when it is done. */
function sse(produce: (send: (event: string) => void) => Promise<void>): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      // A client that left makes enqueue throw; the stream is over then anyway.
      produce((event) => controller.enqueue(encoder.encode(event)))
        .then(() => controller.close())
        .catch(() => {});
    },
  });
  return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
}

/** Rejects when `promise` takes longer than `ms` (a buffering proxy would hang instead). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

Deno.test("gateway: the MCP server unreachable → 502 with a JSON error", async () => {
  const closed = startScripted(echo);
  await closed.close();
  const { t, accessToken } = await gatewayApp(closed.url);
  try {
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(response.status, 502);
    assert.equal((await response.json()).error, "bad_gateway");
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
  } finally {
    t.close();
  }
});

Deno.test("gateway: response headers later than MCP_UPSTREAM_TIMEOUT_MS → 504", async () => {
  const { promise: released, resolve: release } = Promise.withResolvers<void>();
  const upstream = startScripted(async () => {
    await released;
    return new Response("late");
  });
  const { t, accessToken } = await gatewayApp(upstream.url, { MCP_UPSTREAM_TIMEOUT_MS: "150" });
  try {
    const started = performance.now();
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(response.status, 504);
    assert.equal((await response.json()).error, "gateway_timeout");
    assert.ok(performance.now() - started < 5_000);
  } finally {
    release();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: an open event stream outlives MCP_UPSTREAM_TIMEOUT_MS", async () => {
  const upstream = startScripted(() =>
    sse(async (send) => {
      send("id: 1\ndata: early\n\n");
      await new Promise((resolve) => setTimeout(resolve, 500));
      send("id: 2\ndata: late\n\n");
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url, { MCP_UPSTREAM_TIMEOUT_MS: "150" });
  try {
    const response = await mcpRequest(t, accessToken, {
      method: "GET",
      headers: { Accept: "text/event-stream" },
    });
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.match(text, /data: early\n\n.*data: late\n\n$/s);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: Server-Sent Events reach the client one by one", async () => {
  const { promise: firstRead, resolve: readFirst } = Promise.withResolvers<void>();
  const upstream = startScripted(() =>
    sse(async (send) => {
      send("event: message\ndata: one\n\n");
      await firstRead; // the second event exists only once the client has the first
      send("event: message\ndata: two\n\n");
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, {
      method: "GET",
      headers: { Accept: "text/event-stream" },
    });
    assert.equal(response.headers.get("content-type"), "text/event-stream");
    const events = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let received = "";
    while (!received.includes("\n\n")) {
      received += (await within(events.read(), 5_000, "the first event")).value ?? "";
    }
    assert.equal(received, "event: message\ndata: one\n\n");
    readFirst();
    for (;;) {
      const { value, done } = await within(events.read(), 5_000, "the second event");
      if (done) break;
      received += value;
    }
    assert.equal(received, "event: message\ndata: one\n\nevent: message\ndata: two\n\n");
  } finally {
    readFirst();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a POST body of unknown length is read whole before the MCP server sees it", async () => {
  const upstream = startScripted(async (request) => new Response(await request.text()));
  const { t, accessToken } = await gatewayApp(upstream.url);
  const { promise: firstPartSent, resolve: firstPart } = Promise.withResolvers<void>();
  const { promise: checked, resolve: check } = Promise.withResolvers<void>();
  try {
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(encoder.encode("first,"));
        firstPart();
        await checked;
        controller.enqueue(encoder.encode("second"));
        controller.close();
      },
    });
    const answering = mcpRequest(t, accessToken, { body });
    await firstPartSent;
    // Its JSON-RPC message is checked (and decided by a policy) before anything goes on.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(upstream.requests.length, 0, "nothing forwarded before the body is whole");
    check();
    assert.equal(await (await answering).text(), "first,second");
  } finally {
    check();
    t.close();
    await upstream.close();
  }
});
