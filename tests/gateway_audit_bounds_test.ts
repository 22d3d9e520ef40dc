/**
 * Issue 33 §1.2 and §1.9, over real HTTP: one request cannot flood the audit log. A batch of
 * more than MAX_BATCH_MESSAGES messages is answered 400 with one JSON-RPC -32600 error (id null),
 * never reaches the MCP server and writes one audit line; a client's method, name and id are cut
 * to 256 characters plus `…sha256:<16 hex>` of the whole; every 401 of the gateway writes an
 * audit line; and an audit line has one `message` field.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  auditLines,
  type GatewayServer,
  type ScriptedUpstream,
  startGateway,
  startScripted,
} from "./_gateway_mcp.ts";
import { AUDITED_CHARS } from "../src/gateway/audit.ts";
import { MAX_BATCH_MESSAGES } from "../src/gateway/mcp_message.ts";

const answer = async (request: Request) => {
  const body = await request.json();
  const one = (message: { id?: unknown }) => ({ jsonrpc: "2.0", id: message.id, result: {} });
  return Response.json(Array.isArray(body) ? body.map(one) : one(body));
};

async function withGateway(
  fn: (g: GatewayServer, upstream: ScriptedUpstream) => Promise<void>,
  env: Record<string, string> = {},
): Promise<void> {
  const upstream = startScripted(answer);
  const g = await startGateway(upstream.url, { env });
  try {
    await fn(g, upstream);
  } finally {
    await g.close();
    await upstream.close();
  }
}

function post(g: GatewayServer, body: string, token = g.accessToken): Promise<Response> {
  const headers: Record<string, string> = {
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
  };
  if (token !== "") headers.Authorization = `Bearer ${token}`;
  return fetch(g.mcpUrl, { method: "POST", headers, body });
}

function batchOf(size: number): string {
  return JSON.stringify(
    Array.from({ length: size }, (_, i) => ({ jsonrpc: "2.0", id: i, method: "a" })),
  );
}

/** What an audit line carries for `value`: the first 256 characters and the whole's digest. */
function boundedForm(value: string): string {
  const digest = createHash("sha256").update(value).digest("hex").slice(0, 16);
  return `${value.slice(0, AUDITED_CHARS)}…sha256:${digest}`;
}

Deno.test("gateway audit: a batch over the cap is one 400 -32600 (id null) and one audit line", () =>
  withGateway(async (g, upstream) => {
    const within = await post(g, batchOf(MAX_BATCH_MESSAGES));
    assert.equal(within.status, 200);
    assert.equal((await within.json()).length, MAX_BATCH_MESSAGES);
    assert.equal(auditLines(g.lines).length, MAX_BATCH_MESSAGES);
    assert.equal(upstream.requests.length, 1);

    // The 1.5 MB batch of `{"method":"a"}` messages: 100,000 lines before the cap.
    const flood = `[${Array(100_000).fill('{"method":"a"}').join(",")}]`;
    const before = g.lines.length;
    const refused = await post(g, flood);
    assert.equal(refused.status, 400);
    assert.deepEqual(await refused.json(), {
      jsonrpc: "2.0",
      id: null,
      error: {
        code: -32600,
        message:
          `Invalid Request: a batch carries at most ${MAX_BATCH_MESSAGES} messages, not 100000`,
      },
    });
    assert.equal(upstream.requests.length, 1, "never forwarded");
    const written = auditLines(g.lines.slice(before));
    assert.equal(written.length, 1);
    assert.equal(written[0].status, 400);
    assert.equal(written[0].batchSize, 100_000);
    assert.equal(written[0].username, "ada");
  }));

Deno.test("gateway audit: method, name and id are cut to 256 characters and a digest of the whole", () =>
  withGateway(async (g) => {
    const name = "n".repeat(3 * 1024 * 1024);
    const method = `tools/${"m".repeat(1000)}`;
    const id = "i".repeat(5000);
    const long = await post(
      g,
      JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name } }),
    );
    assert.equal(long.status, 200);
    await long.body?.cancel();
    const odd = await post(g, JSON.stringify({ jsonrpc: "2.0", id: 1, method }));
    await odd.body?.cancel();
    const short = await post(
      g,
      JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "echo" } }),
    );
    await short.body?.cancel();

    const [call, other, plain] = auditLines(g.lines);
    assert.equal(call.name, boundedForm(name));
    assert.equal(call.rpcId, boundedForm(id));
    assert.equal(other.method, boundedForm(method));
    assert.equal(plain.name, "echo", "a short value is written as it is");
    assert.equal(plain.rpcId, 2);
    const longest = Math.max(...g.lines.map((line) => JSON.stringify(line).length));
    assert.ok(longest < 2000, `no line is long: ${longest} characters`);
  }));

Deno.test("gateway audit: a cut never splits a character written as a surrogate pair", () =>
  withGateway(async (g) => {
    const name = `${"a".repeat(AUDITED_CHARS - 1)}😀${"b".repeat(10)}`;
    const response = await post(
      g,
      JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name } }),
    );
    await response.body?.cancel();
    const [line] = auditLines(g.lines);
    const digest = createHash("sha256").update(name).digest("hex").slice(0, 16);
    assert.equal(line.name, `${"a".repeat(AUDITED_CHARS - 1)}…sha256:${digest}`);
  }));

Deno.test("gateway audit: every 401 of the gateway writes one audit line", () =>
  withGateway(async (g, upstream) => {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });
    for (const token of ["", "not-a-token", `${g.accessToken}x`]) {
      const before = g.lines.length;
      const refused = await post(g, body, token);
      assert.equal(refused.status, 401);
      await refused.body?.cancel();
      const written = auditLines(g.lines.slice(before));
      assert.equal(written.length, 1, `one line for token ${JSON.stringify(token)}`);
      assert.equal(written[0].status, 401);
      assert.equal(written[0].userId, undefined, "nobody was authenticated");
      assert.equal(typeof written[0].requestId, "string");
    }
    const [noToken, malformed] = auditLines(g.lines);
    assert.equal(noToken.error, "invalid_token");
    assert.equal(malformed.error, "invalid_token");
    assert.equal(upstream.requests.length, 0);
    for (const line of g.lines) assert.ok(!JSON.stringify(line).includes(g.accessToken));
  }));

Deno.test("gateway audit: a line has one `message` field, no `msg`", () =>
  withGateway(async (g) => {
    const response = await post(g, JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }));
    await response.body?.cancel();
    const [line] = auditLines(g.lines);
    assert.equal(line.message, "mcp");
    assert.ok(!("msg" in line));
  }));
