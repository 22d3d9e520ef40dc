/**
 * The two ways the gateway reaches its MCP server (`node:http` for `http:`, `fetch` for
 * `https:`) keep one contract, over real HTTP on loopback: what is sent, answers whole or as they
 * arrive, decoding, broken-off answers, the deadline, cancelling; and the `node:http` pool's own
 * duties (connections reused, idle ones closed before a server closes them).
 */

import assert from "node:assert/strict";
import { brotliCompressSync, gzipSync } from "node:zlib";
import { createDeadlines } from "../src/gateway/deadlines.ts";
import { createFetchClient } from "../src/gateway/mcp_client/fetch_client.ts";
import { mcpClientFor } from "../src/gateway/mcp_client/for_url.ts";
import { createNodeHttpClient } from "../src/gateway/mcp_client/node_http_client.ts";
import type { McpAnswer, McpClient, McpExchange } from "../src/gateway/mcp_client/types.ts";
import { within } from "./_gateway_mcp.ts";
import { BROKEN_OFF_ANSWER, startRawServer, SWITCHING_PROTOCOLS_ANSWER } from "./_raw_http.ts";
import { manualTimers } from "./_timers.ts";

interface Seen {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
  port: number;
}

/** An MCP server on loopback answering by path; `seen` holds what reached it. */
function startServer(handler: (request: Request) => Response | Promise<Response>) {
  const seen: Seen[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (request, info) => {
      seen.push({
        method: request.method,
        url: request.url,
        headers: Object.fromEntries(request.headers),
        body: await request.text(),
        port: info.remoteAddr.port,
      });
      return await handler(request);
    },
  );
  return {
    url: (path: string) => new URL(`http://127.0.0.1:${server.addr.port}${path}`),
    seen,
    close: () => server.shutdown(),
  };
}

const CLIENTS: [string, () => McpClient][] = [
  ["node:http", () => createNodeHttpClient()],
  ["fetch", () => createFetchClient()],
];

/** Sends as the gateway does: a deadline that ends when the answer's headers are in. */
async function send(
  client: McpClient,
  exchange: Omit<McpExchange, "deadline">,
  deadlines = createDeadlines(30_000),
): Promise<McpAnswer> {
  const deadline = deadlines.start();
  try {
    return await client.send({ ...exchange, deadline });
  } finally {
    deadline.done();
  }
}

const post = (url: URL, body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}') => ({
  url,
  method: "POST",
  headers: [["content-type", "application/json"], ["mcp-method", "tools/list"]] as [
    string,
    string,
  ][],
  body: new TextEncoder().encode(body),
});

for (const [name, makeClient] of CLIENTS) {
  Deno.test(`mcp client (${name}): sends method, path and query, headers and body; answers whole`, async () => {
    const server = startServer(() =>
      new Response('{"jsonrpc":"2.0","id":1,"result":{}}', {
        status: 201,
        headers: { "Content-Type": "application/json", "Mcp-Session-Id": "s-1" },
      })
    );
    const client = makeClient();
    try {
      const answer = await send(client, post(server.url("/mcp?tenant=acme")));
      assert.equal(answer.status, 201);
      assert.equal(answer.ok, true);
      assert.equal(answer.headers["mcp-session-id"], "s-1");
      assert.equal(answer.headers["content-type"], "application/json");
      const bytes = await answer.body?.bytes();
      assert.equal(new TextDecoder().decode(bytes), '{"jsonrpc":"2.0","id":1,"result":{}}');
      const [seen] = server.seen;
      assert.equal(seen.method, "POST");
      assert.equal(new URL(seen.url).pathname + new URL(seen.url).search, "/mcp?tenant=acme");
      assert.equal(seen.headers["mcp-method"], "tools/list");
      assert.equal(seen.headers["content-length"], String(seen.body.length));
      assert.equal(seen.body, '{"jsonrpc":"2.0","id":1,"method":"tools/list"}');
    } finally {
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): an event stream's first event arrives before the stream ends`, async () => {
    const rest = Promise.withResolvers<void>();
    const server = startServer(() => {
      const encoder = new TextEncoder();
      const body = new ReadableStream<Uint8Array>({
        async start(controller) {
          controller.enqueue(encoder.encode("data: first\n\n"));
          await rest.promise;
          controller.enqueue(encoder.encode("data: second\n\n"));
          controller.close();
        },
      });
      return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
    });
    const client = makeClient();
    try {
      const answer = await send(client, post(server.url("/mcp")));
      const reader = answer.body!.stream().getReader();
      const first = await reader.read();
      assert.equal(new TextDecoder().decode(first.value), "data: first\n\n");
      rest.resolve();
      let text = "";
      for (let part = await reader.read(); !part.done; part = await reader.read()) {
        text += new TextDecoder().decode(part.value);
      }
      assert.equal(text, "data: second\n\n");
    } finally {
      rest.resolve();
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): a 204 and a HEAD's answer have no body`, async () => {
    const server = startServer((request) =>
      request.method === "HEAD"
        ? new Response(null, { headers: { "Content-Length": "12" } })
        : new Response(null, { status: 204 })
    );
    const client = makeClient();
    try {
      assert.equal((await send(client, post(server.url("/mcp")))).body, null);
      const head = await send(client, { ...post(server.url("/mcp")), method: "HEAD", body: null });
      assert.equal(head.status, 200);
      assert.equal(head.body, null);
    } finally {
      client.close();
      await server.close();
    }
  });

  for (const [encoding, encode] of [["gzip", gzipSync], ["br", brotliCompressSync]] as const) {
    Deno.test(`mcp client (${name}): a ${encoding} answer arrives decoded, whole or streamed`, async () => {
      const text = `{"jsonrpc":"2.0","id":1,"result":{"text":"${"a".repeat(5000)}"}}`;
      const encoded = new Uint8Array(encode(new TextEncoder().encode(text)));
      const server = startServer(() =>
        new Response(encoded, {
          headers: { "Content-Type": "application/json", "Content-Encoding": encoding },
        })
      );
      const client = makeClient();
      try {
        const whole = await send(client, post(server.url("/mcp")));
        assert.equal(whole.headers["content-encoding"], encoding, "as it travelled");
        assert.equal(new TextDecoder().decode(await whole.body?.bytes()), text);
        const streamed = await send(client, post(server.url("/mcp")));
        assert.equal(await new Response(streamed.body?.stream()).text(), text);
      } finally {
        client.close();
        await server.close();
      }
    });
  }

  Deno.test(`mcp client (${name}): an answer broken off rejects whole and errors streamed`, async () => {
    const server = startRawServer(BROKEN_OFF_ANSWER, "close");
    const url = server.url;
    const client = makeClient();
    try {
      const whole = await send(client, post(url));
      await assert.rejects(whole.body!.bytes());
      const streamed = await send(client, post(url));
      await assert.rejects(new Response(streamed.body?.stream()).text());
    } finally {
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): an MCP server switching protocols (101) is refused at once`, async () => {
    const server = startRawServer(SWITCHING_PROTOCOLS_ANSWER, "hold");
    const client = makeClient();
    // A deadline that never passes: only the client itself may end the exchange.
    const deadlines = createDeadlines(5_000, manualTimers().timers);
    try {
      const sending = send(client, post(server.url), deadlines);
      await assert.rejects(within(sending, 5_000, "a 101 answer"), /switched protocols/);
    } finally {
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): no answer within the deadline rejects, its signal aborted`, async () => {
    const release = Promise.withResolvers<void>();
    const server = startServer(async () => {
      await release.promise;
      return new Response("late");
    });
    const clock = manualTimers();
    const deadlines = createDeadlines(5_000, clock.timers);
    const client = makeClient();
    try {
      const deadline = deadlines.start();
      const sending = client.send({ ...post(server.url("/mcp")), deadline });
      while (server.seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      clock.advance(6_000);
      await assert.rejects(sending);
      assert.equal(deadline.signal.aborted, true);
      deadline.done();
    } finally {
      release.resolve();
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): cancelling an answer ends the MCP server's stream`, async () => {
    const cancelled = Promise.withResolvers<void>();
    const server = startServer(() =>
      new Response(
        new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(new TextEncoder().encode(": open\n\n"));
          },
          cancel: () => cancelled.resolve(),
        }),
        { headers: { "Content-Type": "text/event-stream" } },
      )
    );
    const client = makeClient();
    try {
      const answer = await send(client, post(server.url("/mcp")));
      const reader = answer.body!.stream().getReader();
      await reader.read();
      await reader.cancel();
      await cancelled.promise;
      const other = await send(client, post(server.url("/mcp")));
      await other.cancel();
    } finally {
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): a server closing every connection after its answer, saying so or not`, async () => {
    const body = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n";
    for (const answer of [`${body}Connection: close\r\n\r\n{}`, `${body}\r\n{}`]) {
      const server = startRawServer(answer, "close");
      const client = makeClient();
      try {
        // One after another, as fast as they come: none may go out on the closed connection.
        for (let i = 0; i < 20; i++) {
          const whole = await send(client, post(server.url));
          assert.equal(new TextDecoder().decode(await whole.body?.bytes()), "{}");
        }
      } finally {
        client.close();
        await server.close();
      }
    }
  });

  Deno.test(`mcp client (${name}): an answer framed two ways is refused or read as chunked`, async () => {
    // A smuggling attempt: refused, or read by Transfer-Encoding alone (RFC 9112 §6.3); either
    // way the gateway frames what it relays itself.
    const server = startRawServer(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n" +
        "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
      "close",
    );
    const client = makeClient();
    try {
      const read = await send(client, post(server.url))
        .then(async (answer) => new TextDecoder().decode(await answer.body?.bytes()))
        .catch(() => "refused");
      assert.ok(read === "refused" || read === "{}", `read ${read}`);
    } finally {
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): an answer with a megabyte of headers is refused`, async () => {
    const server = startRawServer(
      `HTTP/1.1 200 OK\r\nX-Pad: ${"a".repeat(1024 * 1024)}\r\nContent-Length: 2\r\n\r\n{}`,
      "close",
    );
    const client = makeClient();
    try {
      await assert.rejects(send(client, post(server.url)));
    } finally {
      client.close();
      await server.close();
    }
  });

  Deno.test(`mcp client (${name}): an MCP server that is not there rejects`, async () => {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const url = new URL(`http://127.0.0.1:${listener.addr.port}/mcp`);
    listener.close();
    const client = makeClient();
    try {
      await assert.rejects(send(client, post(url)));
    } finally {
      client.close();
    }
  });
}

Deno.test("mcp client (node:http): asks for the body uncompressed, unless a header says otherwise", async () => {
  const server = startServer(() => new Response("{}"));
  const client = createNodeHttpClient();
  try {
    await (await send(client, post(server.url("/mcp")))).body?.bytes();
    const exchange = post(server.url("/mcp"));
    exchange.headers.push(["accept-encoding", "gzip"]);
    await (await send(client, exchange)).body?.bytes();
    assert.deepEqual(server.seen.map((seen) => seen.headers["accept-encoding"]), [
      "identity",
      "gzip",
    ]);
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("mcp client (node:http): no pool and no sweep before the first exchange", async () => {
  const server = startServer(() => new Response("{}"));
  const clock = manualTimers();
  const client = createNodeHttpClient({ timers: clock.timers });
  try {
    assert.equal(clock.pending.size, 0, "a process that never proxies runs no timer");
    await (await send(client, post(server.url("/mcp")))).body?.bytes();
    assert.equal(clock.pending.size, 1, "one sweep timer for the pool");
  } finally {
    client.close();
    await server.close();
  }
  assert.equal(clock.pending.size, 0, "and none once closed");
});

Deno.test("mcp client (node:http): reuses a connection, and closes it once idle", async () => {
  const server = startServer(() => new Response("{}"));
  const clock = manualTimers();
  const client = createNodeHttpClient({ idleConnectionMs: 1_000, timers: clock.timers });
  try {
    for (let i = 0; i < 3; i++) await (await send(client, post(server.url("/mcp")))).body?.bytes();
    const [first, second, third] = server.seen.map((seen) => seen.port);
    assert.equal(second, first, "one connection for requests one after another");
    assert.equal(third, first);
    clock.advance(600);
    await (await send(client, post(server.url("/mcp")))).body?.bytes();
    assert.equal(server.seen[3].port, first, "used again before it was idle for long");
    clock.advance(600);
    clock.advance(600);
    // The sweep closed it: the next request opens another connection.
    await (await send(client, post(server.url("/mcp")))).body?.bytes();
    assert.notEqual(server.seen[4].port, first);
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("mcp client (node:http): the idle sweep never closes a connection carrying a stream", async () => {
  const rest = Promise.withResolvers<void>();
  const server = startServer(() => {
    const encoder = new TextEncoder();
    return new Response(
      new ReadableStream<Uint8Array>({
        async start(controller) {
          controller.enqueue(encoder.encode("data: first\n\n"));
          await rest.promise;
          controller.enqueue(encoder.encode("data: second\n\n"));
          controller.close();
        },
      }),
      { headers: { "Content-Type": "text/event-stream" } },
    );
  });
  const clock = manualTimers();
  const client = createNodeHttpClient({ idleConnectionMs: 1_000, timers: clock.timers });
  try {
    const answer = await send(client, post(server.url("/mcp")));
    const reader = answer.body!.stream().getReader();
    await reader.read();
    for (let i = 0; i < 10; i++) clock.advance(1_000);
    rest.resolve();
    const next = await reader.read();
    assert.equal(new TextDecoder().decode(next.value), "data: second\n\n");
    await reader.cancel();
  } finally {
    rest.resolve();
    client.close();
    await server.close();
  }
});

Deno.test("mcp client: a plain http: MCP server is reached with node:http", async () => {
  const server = startServer(() => new Response("{}"));
  const client = mcpClientFor(server.url("/mcp"));
  try {
    await (await send(client, post(server.url("/mcp")))).body?.bytes();
    // fetch would ask for gzip and br; the node:http client asks for the body as it is.
    assert.equal(server.seen[0].headers["accept-encoding"], "identity");
  } finally {
    client.close();
    await server.close();
  }
});
