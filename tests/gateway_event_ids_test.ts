/**
 * A stream's event ids are bound to the session they were relayed to. In front of the real SDK
 * v1 server without sessions (stateless) whose event store is shared, as resumability across
 * requests needs, a `Last-Event-ID` is all that names a stream: the server replays to whoever
 * sends one. Through the gateway, Grace's GET with the id Ada's client received (or that id with
 * the gateway's MAC taken off) is refused (400) and never reaches the MCP server; Ada resumes her
 * own stream as before, the MCP server receiving its own id.
 */

import assert from "node:assert/strict";
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
// @ts-types="@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore"
import { InMemoryEventStore } from "@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js";
import { postToGateway, startGateway, startScripted, within } from "./_gateway_mcp.ts";
import { issueTokens } from "./_helpers.ts";
import { createEventIds } from "../src/gateway/event_ids.ts";

const VERSION = "2025-11-25";
const NOTE = "ada's private note";

/** The SDK v1 server, stateless (a server and transport per request), one shared event store. */
function statelessServer() {
  const eventStore = new InMemoryEventStore();
  const lastEventIds: (string | null)[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    if (request.method === "GET") lastEventIds.push(request.headers.get("last-event-id"));
    const mcp = new McpServer({ name: "stateless", version: "1" });
    // What this tool answers is the caller's alone (say, read with the caller's GitLab token).
    mcp.registerTool("note", {}, () => ({ content: [{ type: "text", text: NOTE }] }));
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      eventStore,
    });
    await mcp.connect(transport);
    return await transport.handleRequest(request);
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    lastEventIds,
    close: () => server.shutdown(),
  };
}

function headers(token: string, extra: Record<string, string> = {}): Record<string, string> {
  return { Authorization: `Bearer ${token}`, "MCP-Protocol-Version": VERSION, ...extra };
}

/** Reads `response`'s stream until it holds `text`, or to its end; then lets it go. */
async function readUntil(response: Response, text: string): Promise<string> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let read = "";
  try {
    while (!read.includes(text)) {
      const { done, value } = await reader.read();
      if (done) break;
      read += value;
    }
  } finally {
    await reader.cancel();
  }
  return read;
}

Deno.test("event ids: another user's Last-Event-ID is refused; one's own resumes the stream", async () => {
  const upstream = statelessServer();
  const g = await startGateway(upstream.url, { signIn: false });
  g.t.upstream.user = { id: 1, username: "ada" };
  const ada = (await issueTokens(g.t)).access_token;
  g.t.upstream.user = { id: 2, username: "grace" };
  const grace = (await issueTokens(g.t)).access_token;
  try {
    const call = await fetch(g.mcpUrl, {
      method: "POST",
      headers: headers(ada, {
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      }),
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "note", arguments: {} },
      }),
    });
    assert.equal(call.headers.get("content-type"), "text/event-stream");
    const events = await readUntil(call, NOTE);
    // The priming event's id, as Ada's client received it.
    const primed = /^id: (.+)$/m.exec(events)?.[1];
    assert.ok(primed, events);

    const resume = (token: string, lastEventId: string) =>
      fetch(g.mcpUrl, {
        headers: headers(token, { Accept: "text/event-stream", "Last-Event-ID": lastEventId }),
      });
    // Without the MAC, the MCP server's own id (as another instance or an old client has it).
    const bare = primed.replace(/~[\w-]{22}$/, "");
    for (const id of [primed, bare]) {
      const stolen = await resume(grace, id);
      const text = await within(readUntil(stolen, NOTE), 10_000, "Grace's GET");
      assert.equal(stolen.status, 400, text);
      assert.doesNotMatch(text, new RegExp(NOTE));
    }
    assert.deepEqual(upstream.lastEventIds, [], "no stolen id reached the MCP server");

    const own = await resume(ada, primed);
    assert.equal(own.status, 200);
    const replayed = await within(readUntil(own, NOTE), 10_000, "Ada's GET");
    assert.match(replayed, new RegExp(NOTE));
    assert.deepEqual(upstream.lastEventIds, [bare], "the MCP server gets its own id back");
  } finally {
    await g.close();
    await upstream.close();
  }
});

Deno.test("event ids: bound per session and MCP server; empty ids and a rotated secret", async () => {
  const ids = createEventIds(["new secret", "old secret"]);
  const old = createEventIds(["old secret"]);
  const ada = { sessionId: "s-ada", server: "default" };
  const bound = async (text: string, binding = ada, eventIds = ids) =>
    await new Response(eventIds.bind(new Response(text).body!, binding)).text();
  // Every line ending, an id cut across chunks alike; an empty id (a reset) and `data` untouched.
  const stream = await bound("id: 7\r\ndata: x\rid\nid:\nid:8\n\n");
  const [seven, eight] = [...stream.matchAll(/^id: (\S+)$/gm)].map((match) => match[1]);
  assert.match(stream, /^id: 7~[\w-]{22}\r\ndata: x\rid\nid:\nid: 8~[\w-]{22}\n\n$/);
  assert.equal(ids.unbind(seven, ada), "7");
  assert.equal(ids.unbind(eight, ada), "8");
  assert.equal(ids.unbind(seven, { ...ada, sessionId: "s-grace" }), undefined);
  assert.equal(ids.unbind(seven, { ...ada, server: "docs" }), undefined);
  assert.equal(ids.unbind("7", ada), undefined);
  // Cut anywhere, the stream comes out the same.
  const text = "id: 7\r\ndata: x\rid\nid:\nid:8\n\n";
  for (let size = 1; size < text.length; size++) {
    const chunks = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < text.length; i += size) {
          controller.enqueue(new TextEncoder().encode(text.slice(i, i + size)));
        }
        controller.close();
      },
    });
    assert.equal(await new Response(ids.bind(chunks, ada)).text(), stream, `chunks of ${size}`);
  }
  // An id bound before the secret rotated still reads back.
  const before = (await bound("id: 9\n\n", ada, old)).slice(4, -2);
  assert.equal(ids.unbind(before, ada), "9");
});

Deno.test("event ids: a stream still compressed (deflate) passes as it came, unread", async () => {
  // The gateway decodes gzip and br only; a client decodes deflate itself, so the bytes must
  // reach it as the MCP server sent them (no policy here: nothing to cut).
  const text = 'id: 5\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n';
  const compressed = await new Response(
    new Response(text).body!.pipeThrough(new CompressionStream("deflate")),
  ).bytes();
  const upstream = startScripted(async (request) => {
    await request.body?.cancel();
    return new Response(compressed, {
      headers: { "Content-Type": "text/event-stream", "Content-Encoding": "deflate" },
    });
  });
  const g = await startGateway(upstream.url);
  try {
    const response = await postToGateway(g, '{"jsonrpc":"2.0","id":1,"method":"ping"}');
    assert.equal(response.headers.get("content-encoding"), "deflate");
    assert.deepEqual(await response.bytes(), compressed);
  } finally {
    await g.close();
    await upstream.close();
  }
});
