/**
 * Issue 21, long-lived streams through the gateway, over real HTTP: a `subscriptions/listen`
 * stream outlives MCP_UPSTREAM_TIMEOUT_MS with its keep-alives passed at once and
 * `X-Accel-Buffering: no`; a client that closes its stream cancels the MCP server's side; and a
 * stream ends when its authorization does: at once on the instance that revoked the session,
 * within the check interval on another instance sharing the KV file, and when the access token
 * expires.
 */

import assert from "node:assert/strict";
import { FakeClock } from "./_helpers.ts";
import { modernBody, revoke, startGateway, startScripted, within } from "./_gateway_mcp.ts";
import { STREAM_CHECK_INTERVAL_MS } from "../src/gateway/open_streams.ts";

const encoder = new TextEncoder();
const LISTEN_HEADERS = {
  "Content-Type": "application/json",
  Accept: "application/json, text/event-stream",
  "MCP-Protocol-Version": "2026-07-28",
  "Mcp-Method": "subscriptions/listen",
};

/**
 * An MCP server whose every answer is an event stream: `next()` sends one more chunk (the test
 * decides when), `cancelled` resolves when the gateway cancels its side.
 */
function streamingUpstream() {
  const { promise: cancelled, resolve: onCancel } = Promise.withResolvers<void>();
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  const { promise: opened, resolve: onOpen } = Promise.withResolvers<void>();
  const upstream = startScripted(() => {
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        controller = c;
        c.enqueue(encoder.encode(": open\n\n"));
        onOpen();
      },
      cancel() {
        onCancel();
      },
    });
    return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
  });
  return {
    upstream,
    opened,
    cancelled,
    send(text: string) {
      controller?.enqueue(encoder.encode(text));
    },
    end() {
      controller?.close();
    },
  };
}

function listen(mcpUrl: string, accessToken: string): Promise<Response> {
  return fetch(mcpUrl, {
    method: "POST",
    headers: { ...LISTEN_HEADERS, Authorization: `Bearer ${accessToken}` },
    body: modernBody(1, "subscriptions/listen", { notifications: {} }),
  });
}

/** The readers a test opened: cancelled at its end, so a failed test does not hang its servers. */
const readers = new Set<ReadableStreamDefaultReader<Uint8Array>>();

function track(reader: ReadableStreamDefaultReader<Uint8Array>) {
  readers.add(reader);
  return reader;
}

async function releaseAll(): Promise<void> {
  for (const reader of readers) await reader.cancel().catch(() => {});
  readers.clear();
}

/** Reads the next chunk as text (undefined at the end of the stream). */
async function nextText(reader: ReadableStreamDefaultReader<Uint8Array>) {
  const { done, value } = await reader.read();
  return done ? undefined : new TextDecoder().decode(value);
}

/** Reads until the stream ends. */
async function untilEnd(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
  while ((await reader.read().catch(() => ({ done: true }))).done !== true) {
    // keep reading
  }
}

Deno.test("gateway streams: a listen stream outlives MCP_UPSTREAM_TIMEOUT_MS, keep-alives pass at once", async () => {
  const mcp = streamingUpstream();
  const g = await startGateway(mcp.upstream.url, { env: { MCP_UPSTREAM_TIMEOUT_MS: "100" } });
  try {
    const response = await listen(g.mcpUrl, g.accessToken);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("x-accel-buffering"), "no");
    assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/);
    const reader = track(response.body!.getReader());
    assert.equal(await within(nextText(reader), 5_000, "the first comment"), ": open\n\n");
    // Each keep-alive is sent only after the last one arrived: a buffering gateway would stall.
    for (let i = 0; i < 4; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      mcp.send(":\n\n");
      assert.equal(await within(nextText(reader), 5_000, `keep-alive ${i}`), ":\n\n");
    }
    mcp.send('data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n');
    assert.match((await within(nextText(reader), 5_000, "the event"))!, /list_changed/);
    mcp.end();
    assert.equal(await within(nextText(reader), 5_000, "the end"), undefined);
  } finally {
    await releaseAll();
    await g.close();
    await mcp.upstream.close();
  }
});

type Gateway = Awaited<ReturnType<typeof startGateway>>;
type GatewayOptions = Parameters<typeof startGateway>[1];

/**
 * Runs `fn` with a listen stream open through a gateway started with `options` (its first
 * comment read), and closes everything afterwards.
 */
async function withOpenStream(
  options: GatewayOptions,
  fn: (
    g: Gateway,
    mcp: ReturnType<typeof streamingUpstream>,
    reader: ReadableStreamDefaultReader<Uint8Array>,
  ) => Promise<void>,
): Promise<void> {
  const mcp = streamingUpstream();
  const g = await startGateway(mcp.upstream.url, options);
  try {
    const response = await listen(g.mcpUrl, g.accessToken);
    const reader = track(response.body!.getReader());
    await within(nextText(reader), 5_000, "the first comment");
    await fn(g, mcp, reader);
  } finally {
    await releaseAll();
    await g.close();
    await mcp.upstream.close();
  }
}

Deno.test("gateway streams: a client that closes its stream cancels the MCP server's side", () =>
  withOpenStream({}, async (g, mcp, reader) => {
    await reader.cancel();
    await within(mcp.cancelled, 5_000, "the MCP server's cancellation");
    assert.equal(g.t.deps.openStreams.size, 0);
  }));

Deno.test("gateway streams: at shutdown a listen stream ends, and so does one opened after; a call's stream is left", () =>
  withOpenStream({}, async (g, mcp, reader) => {
    g.t.deps.openStreams.endForShutdown();
    await within(untilEnd(reader), 1_000, "the listen stream's end at shutdown");
    await within(mcp.cancelled, 5_000, "the MCP server's cancellation");
    const late = await listen(g.mcpUrl, g.accessToken);
    assert.equal(late.status, 200);
    await within(untilEnd(track(late.body!.getReader())), 1_000, "a late listen stream's end");
    const call = await fetch(g.mcpUrl, {
      method: "POST",
      headers: {
        ...LISTEN_HEADERS,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "slow",
        Authorization: `Bearer ${g.accessToken}`,
      },
      body: modernBody(2, "tools/call", { name: "slow", arguments: {} }),
    });
    const calling = track(call.body!.getReader());
    assert.match((await within(nextText(calling), 5_000, "the call's first event")) ?? "", /open/);
    assert.equal(g.t.deps.openStreams.size, 1, "the call's stream is held, not ended");
  }));

Deno.test("gateway streams: revoking the session ends its stream at once on this instance", () =>
  withOpenStream({}, async (g, mcp, reader) => {
    await revoke(g.t, g.refreshToken);
    await within(untilEnd(reader), 1_000, "the stream's end after /revoke");
    await within(mcp.cancelled, 5_000, "the MCP server's cancellation");
    assert.equal(g.t.deps.openStreams.size, 0);
  }));

Deno.test("gateway streams: a refresh-token replay that ends the session ends its stream", () =>
  withOpenStream({ env: { REVOKE_ON_REFRESH_REPLAY: "true" } }, async (g, _mcp, reader) => {
    const form = { grant_type: "refresh_token", refresh_token: g.refreshToken };
    for (let i = 0; i < 2; i++) {
      const answer = await g.t.app(
        new Request("http://auth.test/token", {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams(form),
        }),
      );
      await answer.body?.cancel();
    }
    await within(untilEnd(reader), 1_000, "the stream's end after the replay");
  }));

Deno.test("gateway streams: the stream ends when its access token expires", () => {
  const clock = new FakeClock();
  return withOpenStream({ clock }, async (g, mcp, reader) => {
    await g.t.deps.openStreams.check();
    assert.equal(g.t.deps.openStreams.size, 1, "a valid token keeps its stream");
    clock.advance(3600 * 1000);
    await g.t.deps.openStreams.check();
    await within(untilEnd(reader), 1_000, "the stream's end at expiry");
    await within(mcp.cancelled, 5_000, "the MCP server's cancellation");
  });
});

Deno.test("gateway streams: a session revoked on another instance ends the stream within the check interval", async () => {
  const mcp = streamingUpstream();
  const dir = await Deno.makeTempDir({ prefix: "gateway-streams-" });
  const kvPath = `${dir}/kv.sqlite`;
  const clock = new FakeClock(Date.now());
  const a = await startGateway(mcp.upstream.url, { kvPath, clock });
  const b = await startGateway(mcp.upstream.url, { kvPath, clock, signIn: false });
  try {
    const response = await listen(b.mcpUrl, a.accessToken);
    assert.equal(response.status, 200);
    const reader = track(response.body!.getReader());
    await within(nextText(reader), 5_000, "the first comment");
    await revoke(a.t, a.refreshToken);
    // Instance b was not told: it finds out from the KV on its next check.
    await within(untilEnd(reader), 5_000, "the stream's end on the other instance");
    await within(mcp.cancelled, 5_000, "the MCP server's cancellation");
    assert.ok(STREAM_CHECK_INTERVAL_MS <= 2_000);
  } finally {
    await releaseAll();
    await b.close();
    await a.close();
    await mcp.upstream.close();
    await Deno.remove(dir, { recursive: true });
  }
});
