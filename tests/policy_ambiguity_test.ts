/**
 * What a lenient MCP server could read differently from the gateway is refused while a policy
 * is in force (issue 33 §1.3, §1.4, §3.1): a tool or prompt call whose name is missing or not a
 * non-empty string (-32602), a body that repeats a member name anywhere (-32600, one audit
 * line), a request whose id is null or neither a string nor a number (-32600), a 2026-07-28
 * request whose `Mcp-Name` header names what its body does not (-32020); every list answer on
 * every event stream is filtered, a GET resumed with `Last-Event-ID` included, and every list
 * of an answer whose id two list requests of a batch share (the real SDK v1 server); refusals
 * carry -32403, or MCP_POLICY_ERROR_CODE. Each refusal never reaches the MCP server.
 */

import assert from "node:assert/strict";
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer as McpServerV1 } from "@modelcontextprotocol/sdk/server/mcp.js";
import { serveMcp } from "../dev/mcp_http.ts";
import {
  auditLines,
  boundEventId,
  type GatewayServer,
  postToGateway,
  startGateway,
  startScripted,
} from "./_gateway_mcp.ts";
import { loadConfig } from "../src/app/config.ts";
import { TEST_SECRET } from "./_helpers.ts";

/** ada may call read_*; delete_project is refused to everyone (ada is the test user). */
const POLICY = {
  default: "allow",
  rules: [
    { tools: ["delete_*"], deny: { users: ["ada"] } },
    { prompts: ["secret_*"], deny: { users: ["ada"] } },
  ],
};

const TOOLS = [{ name: "read_file" }, { name: "delete_project", description: "Deletes it all" }];

/** A scripted MCP server: lists TOOLS; records every body it receives. */
function mcpServer(sse = false) {
  const bodies: string[] = [];
  const scripted = startScripted(async (request) => {
    if (request.method === "GET") {
      // A resumed stream replays an earlier answer to tools/list.
      const replay = `id: 3\nevent: message\ndata: ${
        JSON.stringify({ jsonrpc: "2.0", id: 41, result: { tools: TOOLS } })
      }\n\n`;
      return new Response(replay, { headers: { "Content-Type": "text/event-stream" } });
    }
    const text = await request.text();
    bodies.push(text);
    const message = JSON.parse(text);
    const result = message.method === "tools/list" ? { tools: TOOLS } : { content: [] };
    const answer = JSON.stringify({ jsonrpc: "2.0", id: message.id, result });
    if (!sse) return new Response(answer, { headers: { "Content-Type": "application/json" } });
    // An answer to another request, on this POST's stream, carrying a list.
    const stray = JSON.stringify({ jsonrpc: "2.0", id: 99, result: { tools: TOOLS } });
    return new Response(`event: message\ndata: ${stray}\n\nevent: message\ndata: ${answer}\n\n`, {
      headers: { "Content-Type": "text/event-stream" },
    });
  });
  return { ...scripted, bodies };
}

interface Setup {
  g: GatewayServer;
  upstream: ReturnType<typeof mcpServer>;
  close(): Promise<void>;
}

async function setup(env: Record<string, string> = {}, sse = false): Promise<Setup> {
  const upstream = mcpServer(sse);
  const path = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(path, JSON.stringify(POLICY));
  const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: path, ...env } });
  return {
    g,
    upstream,
    async close() {
      await g.close();
      await upstream.close();
      await Deno.remove(path);
    },
  };
}

const post = postToGateway;

Deno.test("policy: a tool or prompt call without a non-empty string name is refused, -32602", async () => {
  const s = await setup();
  try {
    const names: unknown[] = [["delete_project"], "", 7, null, { name: "delete_project" }];
    for (const [i, name] of names.entries()) {
      const response = await post(
        s.g,
        JSON.stringify({ jsonrpc: "2.0", id: i, method: "tools/call", params: { name } }),
      );
      const body = await response.json();
      assert.equal(body.error?.code, -32602, `name ${JSON.stringify(name)}`);
      assert.match(body.error.message, /name must be a non-empty string/);
    }
    const missing = await post(s.g, '{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{}}');
    assert.equal((await missing.json()).error.code, -32602);
    assert.deepEqual(s.upstream.bodies, [], "none reached the MCP server");
    const lines = auditLines(s.g.lines);
    assert.ok(lines.every((line) => line.policy === "deny"), JSON.stringify(lines));
  } finally {
    await s.close();
  }
});

Deno.test("policy: a body repeating a member name anywhere is refused, -32600, audited", async () => {
  const s = await setup();
  try {
    const bodies = [
      // Last wins here, first wins in a lenient server: it would run delete_project.
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_project","name":"read_file"}}',
      '{"jsonrpc":"2.0","id":2,"method":"tools/list","method":"tools/call","params":{"name":"delete_project"}}',
      '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file"},"params":{"name":"delete_project"}}',
      '{"jsonrpc":"2.0","id":4,"id":5,"method":"tools/list"}',
      '{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"a://b","ur\\u0069":"a://c"}}',
      '[{"jsonrpc":"2.0","id":7,"method":"tools/list"},{"jsonrpc":"2.0","id":8,"method":"x","method":"y"}]',
    ];
    for (const body of bodies) {
      const before = auditLines(s.g.lines).length;
      const response = await post(s.g, body);
      assert.equal(response.status, 400, body);
      const answer = await response.json();
      assert.equal(answer.error.code, -32600, body);
      assert.equal(answer.id, null);
      assert.match(answer.error.message, /appears twice/);
      const written = auditLines(s.g.lines).slice(before);
      const messages = body.startsWith("[") ? 2 : 1;
      assert.equal(written.length, messages, `an audit line per message: ${body}`);
      assert.ok(written.every((line) => line.status === 400), JSON.stringify(written));
    }
    assert.deepEqual(s.upstream.bodies, [], "none reached the MCP server");
    // The same call without a repeat goes through.
    const fine = await post(
      s.g,
      '{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"read_file","arguments":{"name":"x"}}}',
    );
    assert.equal(fine.status, 200);
    assert.equal(s.upstream.bodies.length, 1);
  } finally {
    await s.close();
  }
});

Deno.test("policy: a request whose id is null is refused, -32600, and never filtered unseen", async () => {
  const s = await setup();
  try {
    const response = await post(s.g, '{"jsonrpc":"2.0","id":null,"method":"tools/list"}');
    assert.equal(response.status, 400);
    const body = await response.json();
    assert.equal(body.error.code, -32600);
    assert.match(body.error.message, /id must not be null/);
    assert.deepEqual(s.upstream.bodies, []);
  } finally {
    await s.close();
  }
});

Deno.test("policy: a request whose id is neither a string nor a number is refused, -32600, never answered unfiltered", async () => {
  // A lenient MCP server that answers whatever id it is given, in JSON.
  const lenient = startScripted(async (request) => {
    const { id } = await request.json();
    return Response.json({ jsonrpc: "2.0", id, result: { tools: TOOLS } });
  });
  const path = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(path, JSON.stringify(POLICY));
  const g = await startGateway(lenient.url, { env: { MCP_POLICY_FILE: path } });
  try {
    for (const id of ["true", "false", '{"n":1}', "[1]"]) {
      const body = `{"jsonrpc":"2.0","id":${id},"method":"tools/list"}`;
      const response = await post(g, body);
      const text = await response.text();
      assert.doesNotMatch(text, /Deletes it all/, body);
      assert.equal(response.status, 400, body);
      const answer = JSON.parse(text);
      assert.equal(answer.error.code, -32600);
      assert.equal(answer.id, null);
      assert.match(answer.error.message, /id must be a string or a number/);
    }
    assert.equal(lenient.requests.length, 0, "none reached the MCP server");
    // A string or number id goes through, and its list is cut.
    const fine = await post(g, '{"jsonrpc":"2.0","id":"a","method":"tools/list"}');
    assert.deepEqual((await fine.json()).result.tools, [{ name: "read_file" }]);
  } finally {
    await g.close();
    await lenient.close();
    await Deno.remove(path);
  }
});

Deno.test("policy: a JSON list answered under another id than its request's is cut all the same", async () => {
  // One server turns the id "7" into 7, another answers a stray id.
  const answers: ((id: unknown) => unknown)[] = [(id) => Number(id), () => 99];
  const path = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(path, JSON.stringify(POLICY));
  for (const answerId of answers) {
    const upstream = startScripted(async (request) => {
      const { id } = await request.json();
      return Response.json({ jsonrpc: "2.0", id: answerId(id), result: { tools: TOOLS } });
    });
    const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: path } });
    try {
      const response = await post(g, '{"jsonrpc":"2.0","id":"7","method":"tools/list"}');
      const text = await response.text();
      assert.equal(response.status, 200);
      assert.deepEqual(listedTools(text), [["read_file"]], text);
      assert.doesNotMatch(text, /Deletes it all/);
    } finally {
      await g.close();
      await upstream.close();
    }
  }
  await Deno.remove(path);
});

Deno.test("policy: a 2026-07-28 request naming in Mcp-Name what its body does not is refused", async () => {
  const s = await setup();
  try {
    const body = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: {
        arguments: {},
        _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28" },
      },
    });
    const response = await post(s.g, body, {
      "MCP-Protocol-Version": "2026-07-28",
      "Mcp-Method": "tools/call",
      "Mcp-Name": "read_file",
    });
    assert.equal(response.status, 400);
    assert.equal((await response.json()).error.code, -32020);
    assert.deepEqual(s.upstream.bodies, []);
  } finally {
    await s.close();
  }
});

Deno.test("policy: every list on every event stream is filtered, a resumed GET's replay included", async () => {
  const s = await setup({}, true);
  try {
    const listed = (text: string) =>
      text.split("\n").filter((line) => line.startsWith("data:"))
        .map((line) =>
          JSON.parse(line.slice(5)).result?.tools?.map((t: { name: string }) => t.name)
        );
    const answer = await post(s.g, '{"jsonrpc":"2.0","id":1,"method":"ping"}');
    const events = await answer.text();
    assert.deepEqual(listed(events), [["read_file"], undefined], events);
    assert.doesNotMatch(events, /Deletes it all/);
    const resumed = await fetch(s.g.mcpUrl, {
      headers: {
        Authorization: `Bearer ${s.g.accessToken}`,
        Accept: "text/event-stream",
        "Last-Event-ID": await boundEventId(s.g.accessToken, "2"),
      },
    });
    const replay = await resumed.text();
    assert.deepEqual(listed(replay), [["read_file"]], replay);
    assert.doesNotMatch(replay, /Deletes it all/);
  } finally {
    await s.close();
  }
});

/** The tool names of every list answer in `text` (a JSON body or an event stream). */
function listedTools(text: string): string[][] {
  const data = text.trimStart().startsWith("[") || text.trimStart().startsWith("{")
    ? [text]
    : text.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5));
  return data.flatMap((json) => [JSON.parse(json)].flat())
    .filter((message) => Array.isArray(message.result?.tools))
    .map((message) => message.result.tools.map((tool: { name: string }) => tool.name));
}

Deno.test("policy: a batch giving tools/list and prompts/list one id gets the tools cut too", async () => {
  // The SDK v1 server (2025-03-26, batches, an event stream): it answers both under id 2.
  const sdk = serveMcp(() => {
    const server = new McpServerV1({ name: "batch", version: "1" });
    for (const { name, description } of TOOLS) {
      server.registerTool(name, { description }, () => ({ content: [] }));
    }
    server.registerPrompt("summary", { description: "Sums up" }, () => ({ messages: [] }));
    return server;
  });
  const path = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(path, JSON.stringify(POLICY));
  const g = await startGateway(sdk.url, { env: { MCP_POLICY_FILE: path } });
  // A server answering JSON: the batch's two answers, both id 2.
  const json = startScripted(() =>
    Response.json([
      { jsonrpc: "2.0", id: 2, result: { tools: TOOLS } },
      { jsonrpc: "2.0", id: 2, result: { prompts: [{ name: "summary" }] } },
    ])
  );
  const gJson = await startGateway(json.url, { env: { MCP_POLICY_FILE: path } });
  const batch = JSON.stringify([
    { jsonrpc: "2.0", id: 2, method: "tools/list" },
    { jsonrpc: "2.0", id: 2, method: "prompts/list" },
  ]);
  try {
    const initialize = await post(
      g,
      JSON.stringify({
        jsonrpc: "2.0",
        id: 0,
        method: "initialize",
        params: {
          protocolVersion: "2025-03-26",
          capabilities: {},
          clientInfo: { name: "raw", version: "1" },
        },
      }),
    );
    await initialize.body?.cancel();
    const headers = {
      "Mcp-Session-Id": initialize.headers.get("mcp-session-id") ?? "",
      "MCP-Protocol-Version": "2025-03-26",
    };
    const initialized = JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" });
    await (await post(g, initialized, headers)).body?.cancel();
    const streamed = await post(g, batch, headers);
    assert.equal(streamed.status, 200);
    const events = await streamed.text();
    assert.deepEqual(listedTools(events), [["read_file"]], events);
    assert.doesNotMatch(events, /Deletes it all/);
    const answered = await post(gJson, batch);
    const text = await answered.text();
    assert.deepEqual(listedTools(text), [["read_file"]], text);
    assert.doesNotMatch(text, /Deletes it all/);
  } finally {
    await g.close();
    await gJson.close();
    await sdk.close();
    await json.close();
    await Deno.remove(path);
  }
});

Deno.test("policy: refusals carry -32403; MCP_POLICY_ERROR_CODE restores -32003, refuses protocol codes", async () => {
  for (
    const [env, code] of [[{}, -32403], [{ MCP_POLICY_ERROR_CODE: "-32003" }, -32003]] as const
  ) {
    const s = await setup(env);
    try {
      const response = await post(
        s.g,
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_project"}}',
      );
      assert.equal((await response.json()).error.code, code);
    } finally {
      await s.close();
    }
  }
  const base = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET };
  assert.equal(loadConfig({ ...base, MCP_POLICY_ERROR_CODE: "4030" }).mcpPolicyErrorCode, 4030);
  for (const code of ["-32000", "-32042", "-32099", "-32602", "-32700", "x", "1.5"]) {
    assert.throws(
      () => loadConfig({ ...base, MCP_POLICY_ERROR_CODE: code }),
      /MCP_POLICY_ERROR_CODE/,
    );
  }
});
