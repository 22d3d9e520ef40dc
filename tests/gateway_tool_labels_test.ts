/**
 * Metrics labels cannot be filled by one user (issue 33 §1.6): through the gateway, a tool earns
 * its own `tool` label only once an MCP server's `tools/list` answer (JSON or an event stream,
 * with or without a policy) or a policy rule names it; a name a caller makes up, and a method MCP
 * does not define, count as `other`.
 */

import assert from "node:assert/strict";
import { postToGateway, startGateway, startScripted } from "./_gateway_mcp.ts";

const PREFIX = "gitlab_mcp_auth_";

/** An MCP server listing `listed` (as JSON, or in an event stream), answering every call. */
function mcpServer(listed: string[], sse: boolean) {
  return startScripted(async (request) => {
    const message = await request.json();
    const result = message.method === "tools/list"
      ? { tools: listed.map((name) => ({ name, inputSchema: { type: "object" } })) }
      : { content: [] };
    const body = JSON.stringify({ jsonrpc: "2.0", id: message.id, result });
    return sse
      ? new Response(`event: message\ndata: ${body}\n\n`, {
        headers: { "Content-Type": "text/event-stream" },
      })
      : new Response(body, { headers: { "Content-Type": "application/json" } });
  });
}

async function toolLabels(env: Record<string, string>, sse: boolean): Promise<Set<string>> {
  const upstream = mcpServer(["listed_tool"], sse);
  const g = await startGateway(upstream.url, { env });
  const post = async (method: string, params: Record<string, unknown> = {}) => {
    const response = await postToGateway(
      g,
      JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
    );
    await response.text();
  };
  try {
    await post("tools/call", { name: "listed_tool" }); // before the list: not yet known
    await post("tools/list");
    for (const name of ["listed_tool", "ruled_tool", "made_up_1", "made_up_2"]) {
      await post("tools/call", { name });
    }
    await post("made/up");
    const samples = (await g.t.deps.metrics.render()).split("\n")
      .filter((line) => line.startsWith(`${PREFIX}gateway_messages_total{`));
    return new Set(
      samples.flatMap((line) =>
        [...line.matchAll(/(tool|method)="([^"]*)"/g)].map(([, label, value]) =>
          `${label}:${value}`
        )
      ),
    );
  } finally {
    await g.close();
    await upstream.close();
  }
}

for (const sse of [false, true]) {
  const answer = sse ? "an event stream" : "JSON";
  Deno.test(`tool labels: learnt from a tools/list answered in ${answer}, without a policy`, async () => {
    const labels = await toolLabels({}, sse);
    assert.ok(labels.has("tool:listed_tool"), [...labels].join(" "));
    assert.ok(labels.has("tool:other"));
    for (const made of ["made_up_1", "made_up_2", "ruled_tool"]) {
      assert.ok(!labels.has(`tool:${made}`), `${made} is other`);
    }
    assert.ok(labels.has("method:other") && !labels.has("method:made/up"));
  });
}

Deno.test("tool labels: a policy rule naming a tool literally gives it a label; a pattern does not", async () => {
  const path = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(
    path,
    JSON.stringify({
      rules: [
        { tools: ["ruled_tool"], allow: { users: ["ada"] } },
        { tools: ["made_*"], allow: { users: ["ada"] } },
      ],
    }),
  );
  try {
    const labels = await toolLabels({ MCP_POLICY_FILE: path }, true);
    assert.ok(labels.has("tool:ruled_tool"), [...labels].join(" "));
    assert.ok(labels.has("tool:listed_tool"));
    assert.ok(!labels.has("tool:made_up_1") && !labels.has("tool:made_*"));
  } finally {
    await Deno.remove(path);
  }
});
