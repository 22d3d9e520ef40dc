/**
 * The audit line of an exchange that failed after it was forwarded says what the client got,
 * over real HTTP: the status of the response (a 503 when the store could not bind the MCP
 * session the server handed out, not a 500) and, as for every refusal by the gateway, its OAuth
 * error code (`bad_gateway` when the MCP server cannot be reached or its list cannot be
 * filtered, `invalid_token` when it refused the GitLab token).
 */

import assert from "node:assert/strict";
import { createLogger } from "../src/logger.ts";
import { auditLines, startScripted } from "./_gateway_mcp.ts";
import { issueTokens, makeTestAppOn } from "./_helpers.ts";
import { switchableKv } from "./_switchable_kv.ts";

/** The gateway over a switchable KV in front of `upstreamUrl`, served on loopback. */
async function gatewayOn(upstreamUrl: string, env: Record<string, string> = {}) {
  const lines: Record<string, unknown>[] = [];
  const kv = switchableKv(await Deno.openKv(":memory:"));
  const t = await makeTestAppOn(kv, {
    env: { MCP_UPSTREAM_URL: upstreamUrl, ...env },
    logger: createLogger((line) => lines.push(JSON.parse(line))),
  });
  const { access_token } = await issueTokens(t);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request, info) => t.app(request, info),
  );
  return {
    kv,
    lines,
    metrics: t.deps.metrics,
    call: (method: string) =>
      fetch(`http://127.0.0.1:${server.addr.port}/mcp`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${access_token}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: {} }),
      }),
    async close() {
      await server.shutdown();
      t.close();
      kv.close();
    },
  };
}

Deno.test("gateway audit: the store failing to bind the MCP server's session is audited as the 503 answered", async () => {
  const upstream = startScripted(() =>
    Response.json({ jsonrpc: "2.0", id: 1, result: {} }, {
      headers: { "Mcp-Session-Id": crypto.randomUUID() },
    })
  );
  const g = await gatewayOn(upstream.url);
  try {
    const first = await g.call("initialize");
    assert.equal(first.status, 200, await first.clone().text());
    await first.body?.cancel();
    // The token is remembered as verified: only binding the new MCP session reads the store.
    g.kv.unavailable = true;
    const second = await g.call("initialize");
    assert.equal(second.status, 503, await second.clone().text());
    await second.body?.cancel();
    g.kv.unavailable = false;
    const [, failed] = auditLines(g.lines);
    assert.equal(failed.status, 503, "the status the client got");
    assert.equal(failed.error, "temporarily_unavailable");
    assert.equal(failed.method, "initialize");
  } finally {
    await g.close();
    await upstream.close();
  }
});

Deno.test("gateway audit: an MCP server unreachable, refusing the GitLab token or listing unreadably is audited with the error answered", async () => {
  const closed = startScripted(() => new Response(null, { status: 500 }));
  await closed.close();
  const unreachable = await gatewayOn(closed.url);
  try {
    const response = await unreachable.call("tools/list");
    assert.equal(response.status, 502);
    await response.body?.cancel();
    const [line] = auditLines(unreachable.lines);
    assert.equal(line.status, 502);
    assert.equal(line.error, "bad_gateway");
  } finally {
    await unreachable.close();
  }

  const refusing = startScripted(() => new Response("no", { status: 401 }));
  const g = await gatewayOn(refusing.url);
  try {
    const response = await g.call("tools/list");
    assert.equal(response.status, 401);
    await response.body?.cancel();
    const [line] = auditLines(g.lines);
    assert.equal(line.status, 401);
    assert.equal(line.error, "invalid_token");
  } finally {
    await g.close();
    await refusing.close();
  }

  // Under a policy a list must be cut: one that is not JSON is refused, never passed uncut.
  const policyPath = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(policyPath, JSON.stringify({ default: "allow", rules: [] }));
  const html = startScripted(() =>
    new Response("<p>tools</p>", { headers: { "Content-Type": "text/html" } })
  );
  const filtered = await gatewayOn(html.url, { MCP_POLICY_FILE: policyPath });
  try {
    const response = await filtered.call("tools/list");
    assert.equal(response.status, 502);
    await response.body?.cancel();
    const lines = auditLines(filtered.lines);
    assert.equal(lines.length, 1, "audited once, by the relay");
    assert.equal(lines[0].status, 502);
    assert.equal(lines[0].error, "bad_gateway");
    assert.match(await filtered.metrics.render(), /tools\/list",outcome="upstream_error"/);
  } finally {
    await filtered.close();
    await html.close();
    await Deno.remove(policyPath);
  }
});

Deno.test("gateway audit: an unexpected failure relaying the MCP server's answer is one audit line of the 502 answered, counted upstream_error", async () => {
  // Under a policy the list is cut (the nameless item), so the answer is re-serialised.
  const policyPath = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(policyPath, JSON.stringify({ default: "allow", rules: [] }));
  const hostile = startScripted(() =>
    Response.json({ jsonrpc: "2.0", id: 1, result: { tools: [{ name: "boom" }, {}] } })
  );
  const g = await gatewayOn(hostile.url, { MCP_POLICY_FILE: policyPath });
  // Anything thrown while the answer is filtered that the relay does not expect.
  const { gatewayMessages } = g.metrics;
  const learnTool = gatewayMessages.learnTool.bind(gatewayMessages);
  gatewayMessages.learnTool = (name) => {
    if (name === "boom") throw new RangeError("Maximum call stack size exceeded");
    learnTool(name);
  };
  try {
    const response = await g.call("tools/list");
    assert.equal(response.status, 502);
    const body = await response.json();
    assert.equal(body.error, "bad_gateway");
    assert.doesNotMatch(JSON.stringify(body), /RangeError|stack/);
    const lines = auditLines(g.lines);
    assert.equal(lines.length, 1, "exactly one audit line");
    assert.equal(lines[0].status, 502);
    assert.equal(lines[0].error, "bad_gateway");
    assert.equal(lines[0].method, "tools/list");
    const warned = g.lines.find((line) => line.message === "MCP server's answer not relayed");
    assert.match(String(warned?.error), /RangeError/, "the cause is logged for the operator");
    const counted = (await g.metrics.render()).split("\n")
      .filter((line) => line.startsWith("gitlab_mcp_auth_gateway_messages_total{"));
    assert.deepEqual(counted, [
      'gitlab_mcp_auth_gateway_messages_total{server="default",method="tools/list",outcome="upstream_error",tool="none"} 1',
    ]);
  } finally {
    await g.close();
    await hostile.close();
    await Deno.remove(policyPath);
  }
});
