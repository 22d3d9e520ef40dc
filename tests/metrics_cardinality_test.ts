/**
 * No client can make `/metrics` grow, over real HTTP: thousands of distinct tool names called,
 * made-up JSON-RPC methods, an MCP server listing a thousand tools, and paths nobody serves
 * leave every family with a bounded set of series (tool names: the first 100 listed, then
 * `other`; methods: MCP's own, then `other`; routes: the route table's, `mcp` or `unknown`).
 */

import assert from "node:assert/strict";
import { MAX_TOOL_LABELS } from "../src/metrics/catalog.ts";
import { MCP_METHODS } from "../src/metrics/mcp_methods.ts";
import { startGateway, startScripted } from "./_gateway_mcp.ts";

const METRICS_TOKEN = "metrics-token-that-is-at-least-32-bytes!";
const LISTED = 1000;

/** The label sets of every series of `family` in an exposition. */
function seriesOf(text: string, family: string): Record<string, string>[] {
  return text.split("\n").filter((line) => line.startsWith(`${family}{`)).map((line) =>
    Object.fromEntries(
      [...line.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map(([, name, value]) => [name, value]),
    )
  );
}

Deno.test("metrics: thousands of names from clients leave the series bounded", async () => {
  const upstream = startScripted(async (request) => {
    const body = await request.json();
    const one = (message: { id?: number; method?: string }) => ({
      jsonrpc: "2.0",
      id: message.id,
      result: message.method === "tools/list"
        ? { tools: Array.from({ length: LISTED }, (_, i) => ({ name: `listed-${i}` })) }
        : {},
    });
    return Response.json(Array.isArray(body) ? body.map(one) : one(body));
  });
  const g = await startGateway(upstream.url, {
    env: { METRICS_TOKEN, RATE_LIMIT_MCP: "10000/60" },
  });
  const base = g.mcpUrl.slice(0, -"/mcp".length);
  const post = async (body: unknown) => {
    const response = await fetch(g.mcpUrl, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${g.accessToken}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      },
      body: JSON.stringify(body),
    });
    assert.equal(response.status, 200);
    await response.body?.cancel();
  };
  try {
    await post({ jsonrpc: "2.0", id: 0, method: "tools/list" });
    let id = 1;
    for (let batch = 0; batch < 20; batch++) {
      await post(Array.from({ length: 100 }, () => ({
        jsonrpc: "2.0",
        id: id++,
        method: "tools/call",
        params: { name: `made-up-${id}` },
      })));
      await post(Array.from({ length: 100 }, () => ({
        jsonrpc: "2.0",
        id: id++,
        method: `made/up-${id}`,
      })));
    }
    for (let first = 0; first < 200; first += 100) {
      await post(Array.from({ length: 100 }, (_, i) => ({
        jsonrpc: "2.0",
        id: id++,
        method: "tools/call",
        params: { name: `listed-${first + i}` },
      })));
    }
    for (let i = 0; i < 200; i++) {
      const response = await fetch(`${base}/nobody-serves-${i}?q=${i}`, { method: `GET` });
      assert.equal(response.status, 404);
      await response.body?.cancel();
    }

    const scrape = await fetch(`${base}/metrics`, {
      headers: { Authorization: `Bearer ${METRICS_TOKEN}` },
    });
    assert.equal(scrape.status, 200);
    const text = await scrape.text();

    const messages = seriesOf(text, "gitlab_mcp_auth_gateway_messages_total");
    const tools = new Set(messages.map((labels) => labels.tool));
    // The first 100 listed, `other` and `none` (tools/list).
    assert.equal(tools.size, MAX_TOOL_LABELS + 2, `${tools.size} tool values`);
    assert.ok(tools.has("other"), "made-up names are other");
    assert.ok(![...tools].some((tool) => tool.startsWith("made-up-")));
    const methods = new Set(messages.map((labels) => labels.method));
    const known = new Set<string>([...MCP_METHODS, "other", "unparsed"]);
    assert.deepEqual([...methods].filter((method) => !known.has(method)), []);
    const routes = new Set(
      seriesOf(text, "gitlab_mcp_auth_http_requests_total").map((labels) => labels.route),
    );
    assert.ok(![...routes].some((route) => route.startsWith("/nobody")), [...routes].join(" "));
    const lines = text.split("\n").filter((line) => line !== "" && !line.startsWith("#"));
    assert.ok(lines.length < 500, `${lines.length} series lines`);
  } finally {
    await g.close();
    await upstream.close();
  }
});
