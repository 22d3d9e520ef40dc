/**
 * The policy's list filter reads an event stream's events as the MCP SDKs' own parser
 * (`eventsource-parser`, after WHATWG HTML) reads them, however the MCP server frames them: a
 * line ends at CRLF, LF or a lone CR, mixed as they come (`\n\r\n`, `\r\n\n`, `\n\r`, `\r\r\n`),
 * and a CRLF may be cut between two chunks. The SDK v1 and v2 clients list tools through the
 * real gateway in front of a scripted MCP server that frames its `tools/list` answer each way,
 * between two notifications; neither client ever sees the tool the policy refuses.
 */

import assert from "node:assert/strict";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
} from "@modelcontextprotocol/client";
import { type GatewayServer, startGateway, startScripted, within } from "./_gateway_mcp.ts";
import { filterEventStream, listRequestsOf } from "../src/gateway/list_filter.ts";

/** delete_project is refused to ada, the test user; read_file is not. */
const POLICY = { default: "allow", rules: [{ tools: ["delete_*"], deny: { users: ["ada"] } }] };
const TOOLS = ["delete_project", "read_file"];

/**
 * How an event's last line ends, then the empty line that ends the event: every pair of line
 * endings but `\r` then `\n` (one CRLF, not two line endings).
 */
const BOUNDARIES = ["\n\n", "\n\r", "\n\r\n", "\r\r", "\r\r\n", "\r\n\n", "\r\n\r", "\r\n\r\n"];

/** How the events' other lines end. */
const LINE_ENDINGS = ["\n", "\r", "\r\n"];

/** A `tools/list` answer between two notifications, each event ended by `boundary`. */
function framed(id: unknown, eol: string, boundary: string): string {
  const note = JSON.stringify({
    jsonrpc: "2.0",
    method: "notifications/message",
    params: { level: "info", data: "listing" },
  });
  const answer = JSON.stringify({
    jsonrpc: "2.0",
    id,
    result: { tools: TOOLS.map((name) => ({ name, inputSchema: { type: "object" } })) },
  });
  const event = (data: string) => `event: message${eol}data: ${data}${boundary}`;
  // The last event ends with LF LF: a stream that ends on a lone CR leaves the parser waiting.
  return `${event(note)}${event(answer)}event: message${eol}data: ${note}\n\n`;
}

/** The text cut after every CR, so each CRLF arrives split between two chunks. */
function cutAfterEveryCr(text: string): ReadableStream<Uint8Array> {
  const parts = text.split(/(?<=\r)/);
  const encoder = new TextEncoder();
  return new ReadableStream({
    pull(controller) {
      const part = parts.shift();
      if (part === undefined) controller.close();
      else controller.enqueue(encoder.encode(part));
    },
  });
}

/** An MCP server (2025-era, no sessions) answering `tools/list` framed as `framing` says. */
function mcpServer(framing: { eol: string; boundary: string }) {
  return startScripted(async (request) => {
    if (request.method !== "POST") return new Response(null, { status: 405 });
    const message = await request.json();
    if (message.id === undefined) return new Response(null, { status: 202 });
    if (message.method === "initialize") {
      return Response.json({
        jsonrpc: "2.0",
        id: message.id,
        result: {
          protocolVersion: message.params.protocolVersion,
          capabilities: { tools: {} },
          serverInfo: { name: "framing", version: "1" },
        },
      });
    }
    if (message.method !== "tools/list") {
      return Response.json({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message } });
    }
    const body = cutAfterEveryCr(framed(message.id, framing.eol, framing.boundary));
    return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
  });
}

async function withGateway(
  run: (g: GatewayServer, framing: { eol: string; boundary: string }) => Promise<void>,
): Promise<void> {
  const framing = { eol: "\n", boundary: "\n\n" };
  const upstream = mcpServer(framing);
  const policyPath = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(policyPath, JSON.stringify(POLICY));
  const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: policyPath } });
  try {
    await run(g, framing);
  } finally {
    await g.close();
    await upstream.close();
    await Deno.remove(policyPath);
  }
}

/** Lists tools with `client` under every framing; the names it saw under each. */
async function listUnderEveryFraming(
  client: { listTools(): Promise<{ tools: { name: string }[] }> },
  framing: { eol: string; boundary: string },
): Promise<void> {
  for (const eol of LINE_ENDINGS) {
    for (const boundary of BOUNDARIES) {
      Object.assign(framing, { eol, boundary });
      const what = `lines ending ${JSON.stringify(eol)}, events ${JSON.stringify(boundary)}`;
      const { tools } = await within(client.listTools(), 10_000, what);
      assert.deepEqual(tools.map(({ name }) => name), ["read_file"], what);
    }
  }
}

Deno.test("list filter framing: the SDK v1 client never sees a refused tool, however events are framed", async () => {
  await withGateway(async (g, framing) => {
    const client = new ClientV1({ name: "framing-v1", version: "1" });
    await client.connect(
      new TransportV1(new URL(g.mcpUrl), {
        requestInit: { headers: { Authorization: `Bearer ${g.accessToken}` } },
      }),
    );
    try {
      await listUnderEveryFraming(client, framing);
    } finally {
      await client.close();
    }
  });
});

Deno.test("list filter framing: the SDK v2 client never sees a refused tool, however events are framed", async () => {
  await withGateway(async (g, framing) => {
    const client = new ClientV2({ name: "framing-v2", version: "1" });
    const token = g.accessToken;
    await client.connect(
      new TransportV2(new URL(g.mcpUrl), {
        authProvider: { token: () => Promise.resolve(token) },
      }),
    );
    try {
      await listUnderEveryFraming(client, framing);
    } finally {
      await client.close();
    }
  });
});

Deno.test("list filter framing: every framing, in chunks of every size, cuts the answer alone", async () => {
  const lists = listRequestsOf([{ method: "tools/list", id: 7 }]);
  const permits = (_target: string, name: string) => name !== "delete_project";
  const encoder = new TextEncoder();
  for (const eol of LINE_ENDINGS) {
    for (const boundary of BOUNDARIES) {
      const text = framed(7, eol, boundary);
      for (const size of [1, 2, 3, 7, text.length]) {
        const body = new ReadableStream<Uint8Array>({
          start(controller) {
            for (let i = 0; i < text.length; i += size) {
              controller.enqueue(encoder.encode(text.slice(i, i + size)));
            }
            controller.close();
          },
        });
        const out = await new Response(filterEventStream(body, lists, permits)).text();
        const what = `${JSON.stringify([eol, boundary])} in chunks of ${size}`;
        assert.doesNotMatch(out, /delete_project/, what);
        assert.match(out, /read_file/, what);
        // The notifications around it pass as they came, line endings and all.
        const [first] = text.split("event: message", 2).filter(Boolean);
        assert.ok(out.startsWith(`event: message${first}`), what);
        assert.ok(out.endsWith(text.slice(text.lastIndexOf("event: message"))), what);
      }
    }
  }
});

Deno.test("list filter framing: a stream still compressed (deflate) is refused, not passed uncut", async () => {
  // An MCP server compressing whatever it was asked (or the client's Accept-Encoding passed on
  // by MCP_UPSTREAM_FORWARD_HEADERS): the gateway decodes gzip and br only, the client more.
  const upstream = startScripted(async (request) => {
    const message = await request.json();
    const body = new Response(framed(message.id, "\n", "\n\n")).body!
      .pipeThrough(new CompressionStream("deflate"));
    return new Response(body, {
      headers: { "Content-Type": "text/event-stream", "Content-Encoding": "deflate" },
    });
  });
  const policyPath = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(policyPath, JSON.stringify(POLICY));
  const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: policyPath } });
  try {
    const response = await fetch(g.mcpUrl, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${g.accessToken}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    const text = await response.text();
    assert.doesNotMatch(text, /delete_project/);
    assert.equal(response.status, 502, text);
  } finally {
    await g.close();
    await upstream.close();
    await Deno.remove(policyPath);
  }
});
