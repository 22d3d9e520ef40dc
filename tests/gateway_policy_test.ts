/**
 * What they may call (issue 23 §2, MCP_POLICY_FILE), over real HTTP: the real app in gateway
 * mode in front of a scripted MCP server, users whose group levels the fake GitLab answers at
 * sign-in. Allow, deny and default decisions; a refused call never reaching the MCP server and
 * answered 200 with a JSON-RPC error of the same id; lists filtered in JSON and in an event
 * stream; the decision in the audit line; the policy reloaded (in process, and on SIGHUP).
 */

import assert from "node:assert/strict";
import { auditLines, type GatewayServer, startGateway, startScripted } from "./_gateway_mcp.ts";
import { issueTokens } from "./_helpers.ts";
import { loadConfig } from "../src/app/config.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { spawnService, waitFor } from "./_service.ts";

/** The issue's example. */
const ISSUE_POLICY = {
  default: "allow",
  rules: [
    {
      tools: ["delete_*", "merge_*"],
      allow: { groups: ["acme/maintainers:maintainer"], users: ["ada"] },
    },
    { tools: ["*"], deny: { users: ["mallory"] } },
    { resources: ["gitlab://secrets/*"], allow: { groups: ["acme/security"] } },
  ],
};

const TOOLS = ["delete_project", "merge_request", "read_file"];

/** An MCP server listing TOOLS, answering every call; JSON unless `sse` is set. */
function mcpServer(options: { sse: boolean } = { sse: false }) {
  const methods: string[] = [];
  const scripted = startScripted(async (request) => {
    const message = await request.json();
    methods.push(message.method);
    // 2026-07-28's caching hints: the same list for everyone, as the MCP server sees it.
    const result = message.method === "tools/list"
      ? {
        tools: [...TOOLS.map((name) => ({ name, inputSchema: { type: "object" } })), {}],
        ttlMs: 60_000,
        cacheScope: "public",
      }
      : message.method === "resources/list"
      ? {
        resources: [{ uri: "gitlab://secrets/key", name: "k" }, { uri: "gitlab://x", name: "x" }],
      }
      : { content: [{ type: "text", text: `called ${message.params?.name}` }] };
    const body = JSON.stringify({ jsonrpc: "2.0", id: message.id, result });
    if (!options.sse) return Response.json(JSON.parse(body));
    const events = `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message",` +
      `"params":{"level":"info","data":"listing"}}\n\n` +
      `event: message\nid: 7\ndata: ${body}\n\n`;
    return new Response(events, { headers: { "Content-Type": "text/event-stream" } });
  });
  return { ...scripted, methods };
}

async function writePolicy(policy: unknown): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(path, typeof policy === "string" ? policy : JSON.stringify(policy));
  return path;
}

interface PolicyGateway {
  gateway: GatewayServer;
  upstream: ReturnType<typeof mcpServer>;
  policyPath: string;
  accessToken: string;
  close(): Promise<void>;
}

/** A gateway with `policy`, and `username` signed in with `groupLevels`. */
async function policyGateway(
  policy: unknown,
  username: string,
  groupLevels: Record<string, number> = {},
  options: { sse?: boolean; env?: Record<string, string> } = {},
): Promise<PolicyGateway> {
  const upstream = mcpServer({ sse: options.sse ?? false });
  const policyPath = await writePolicy(policy);
  const gateway = await startGateway(upstream.url, {
    env: { MCP_POLICY_FILE: policyPath, ...options.env },
    signIn: false,
  });
  gateway.t.upstream.user = { id: 77, username };
  gateway.t.upstream.groupLevels = groupLevels;
  const { access_token } = await issueTokens(gateway.t);
  return {
    gateway,
    upstream,
    policyPath,
    accessToken: access_token,
    async close() {
      await gateway.close();
      await upstream.close();
      await Deno.remove(policyPath);
    },
  };
}

let nextId = 1;

/** POSTs one JSON-RPC request; the response and its parsed body. */
async function rpc(p: PolicyGateway, method: string, params: Record<string, unknown> = {}) {
  const id = nextId++;
  const response = await fetch(p.gateway.mcpUrl, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${p.accessToken}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
  });
  const text = await response.text();
  return { id, response, text, body: parseAnswer(response, text) };
}

/** The JSON-RPC response in a JSON body or in the stream's last event. */
function parseAnswer(response: Response, text: string) {
  if (!response.headers.get("content-type")?.startsWith("text/event-stream")) {
    return JSON.parse(text);
  }
  const events = text.split("\n\n").filter((event) => event.includes("data:"));
  const data = events.at(-1)!.split("\n").filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(5).trim()).join("\n");
  return JSON.parse(data);
}

function callTool(p: PolicyGateway, name: string) {
  return rpc(p, "tools/call", { name, arguments: {} });
}

/** How many requests of `method` the MCP server got. */
function seen(p: PolicyGateway, method: string): number {
  return p.upstream.methods.filter((seen) => seen === method).length;
}

Deno.test("policy: an allow rule admits the user it names and the group's maintainers", async () => {
  const ada = await policyGateway(ISSUE_POLICY, "ada");
  try {
    const { response, body } = await callTool(ada, "delete_project");
    assert.equal(response.status, 200);
    assert.equal(body.result.content[0].text, "called delete_project");
  } finally {
    await ada.close();
  }
  const maintainer = await policyGateway(ISSUE_POLICY, "grace", { "acme/maintainers": 40 });
  try {
    const { body } = await callTool(maintainer, "merge_request");
    assert.equal(body.result.content[0].text, "called merge_request");
    // The policy's group was learnt at sign-in though no list restricts who signs in.
    assert.deepEqual(
      maintainer.gateway.t.upstream.membershipsSeen.map((seen) => seen.groupPath),
      ["acme/maintainers", "acme/security"],
    );
  } finally {
    await maintainer.close();
  }
});

Deno.test("policy: a refused call never reaches the MCP server; 200 with a JSON-RPC error of its id", async () => {
  // A developer is below the rule's role; not Ada either.
  const p = await policyGateway(ISSUE_POLICY, "grace", { "acme/maintainers": 30 });
  try {
    const { id, response, body } = await callTool(p, "delete_project");
    assert.equal(response.status, 200);
    assert.equal(body.id, id);
    assert.equal(body.error.code, -32403);
    assert.match(body.error.message, /"delete_project" is not allowed for this account/);
    assert.equal(seen(p, "tools/call"), 0);
    const [line] = auditLines(p.gateway.lines);
    assert.equal(line.name, "delete_project");
    assert.equal(line.policy, "deny");
    assert.equal(line.policyRule, 0);
    assert.equal(line.status, 200);
    assert.equal(line.rpcError, true);
  } finally {
    await p.close();
  }
});

Deno.test("policy: a batch of notifications with a refused call is answered 202 with no body, as one is", async () => {
  const p = await policyGateway(ISSUE_POLICY, "grace");
  try {
    const call = { jsonrpc: "2.0", method: "tools/call", params: { name: "delete_project" } };
    const initialized = { jsonrpc: "2.0", method: "notifications/initialized" };
    for (const body of [call, [initialized, call]]) {
      const response = await fetch(p.gateway.mcpUrl, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${p.accessToken}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
        },
        body: JSON.stringify(body),
      });
      // JSON-RPC 2.0 §6: no response objects, no array, "nothing at all".
      assert.equal(response.status, 202, JSON.stringify(body));
      assert.equal(await response.text(), "");
    }
    assert.equal(seen(p, "tools/call"), 0);
  } finally {
    await p.close();
  }
});

Deno.test("policy: what it cannot read never passes: a body that is not JSON to us, a call in a PUT", async () => {
  const p = await policyGateway(ISSUE_POLICY, "grace", { "acme/maintainers": 30 });
  try {
    const send = (method: string, body: string) =>
      fetch(p.gateway.mcpUrl, {
        method,
        headers: { Authorization: `Bearer ${p.accessToken}`, "Content-Type": "application/json" },
        body,
      });
    // A Python MCP server's parser takes NaN: it would find the refused call in this body.
    const nan = await send(
      "POST",
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_project","arguments":{"n":NaN}}}',
    );
    assert.equal(nan.status, 400);
    assert.deepEqual(await nan.json(), {
      jsonrpc: "2.0",
      id: null,
      error: { code: -32700, message: "Parse error: MCP_POLICY_FILE decides only JSON" },
    });
    const put = await send(
      "PUT",
      JSON.stringify({
        jsonrpc: "2.0",
        id: 2,
        method: "tools/call",
        params: { name: "delete_project" },
      }),
    );
    assert.equal(put.status, 200);
    assert.equal((await put.json()).error.code, -32403);
    assert.equal(p.upstream.requests.length, 0);
    assert.deepEqual(auditLines(p.gateway.lines).map((line) => line.status), [400, 200]);
  } finally {
    await p.close();
  }
});

Deno.test("policy: a deny rule refuses whom it names and lets the others on to the default", async () => {
  const mallory = await policyGateway(ISSUE_POLICY, "Mallory");
  try {
    const { body } = await callTool(mallory, "read_file");
    assert.match(body.error.message, /not allowed/);
    assert.equal(auditLines(mallory.gateway.lines)[0].policyRule, 1);
    assert.equal(seen(mallory, "tools/call"), 0);
  } finally {
    await mallory.close();
  }
  const grace = await policyGateway(ISSUE_POLICY, "grace");
  try {
    const { body } = await callTool(grace, "read_file");
    assert.equal(body.result.content[0].text, "called read_file");
    const [line] = auditLines(grace.gateway.lines);
    assert.equal(line.policy, "allow");
    assert.equal(line.policyRule, undefined);
  } finally {
    await grace.close();
  }
});

Deno.test("policy: default deny refuses what no rule decides; resources and prompts by their names", async () => {
  const policy = {
    default: "deny",
    rules: [
      { tools: ["read_*"], allow: { users: ["grace"] } },
      { prompts: ["summary"], allow: { users: ["grace"] } },
      { resources: ["gitlab://secrets/*"], allow: { groups: ["acme/security"] } },
    ],
  };
  const p = await policyGateway(policy, "grace");
  try {
    assert.equal((await callTool(p, "read_file")).body.result.content[0].text, "called read_file");
    assert.match((await callTool(p, "merge_request")).body.error.message, /Tool "merge_request"/);
    const secret = await rpc(p, "resources/read", { uri: "gitlab://secrets/key" });
    assert.match(secret.body.error.message, /Resource "gitlab:\/\/secrets\/key" is not allowed/);
    assert.equal(
      (await rpc(p, "prompts/get", { name: "summary" })).body.result !== undefined,
      true,
    );
    assert.match((await rpc(p, "prompts/get", { name: "other" })).body.error.message, /Prompt/);
    assert.equal(seen(p, "resources/read"), 0);
    assert.deepEqual(
      auditLines(p.gateway.lines).map((line) => [line.policy, line.policyRule]),
      [["allow", 0], ["deny", undefined], ["deny", 2], ["allow", 1], ["deny", undefined]],
    );
  } finally {
    await p.close();
  }
});

Deno.test("policy: tools/list answers only what the account may call (JSON)", async () => {
  const p = await policyGateway(ISSUE_POLICY, "grace");
  try {
    const { response, body, text } = await rpc(p, "tools/list");
    assert.equal(response.status, 200);
    assert.deepEqual(body.result.tools.map((tool: { name: string }) => tool.name), ["read_file"]);
    // What this account may call is its own: no shared cache may hand it to another.
    assert.deepEqual([body.result.cacheScope, body.result.ttlMs], ["private", 60_000]);
    // The length is the filtered body's, not the MCP server's.
    assert.equal(
      response.headers.get("content-length"),
      String(new TextEncoder().encode(text).length),
    );
    const resources = await rpc(p, "resources/list");
    assert.deepEqual(
      resources.body.result.resources.map((item: { uri: string }) => item.uri),
      ["gitlab://x"],
    );
  } finally {
    await p.close();
  }
});

Deno.test("policy: a list answered under another content type is filtered all the same, or refused", async () => {
  const policyPath = await writePolicy(ISSUE_POLICY);
  for (const type of ["text/plain", "application/vnd.example+json", "text/html"]) {
    const upstream = startScripted(async (request) => {
      const { id } = await request.json();
      const body = type === "text/html" ? "<p>tools</p>" : JSON.stringify({
        jsonrpc: "2.0",
        id,
        result: { tools: TOOLS.map((name) => ({ name })) },
      });
      return new Response(body, { headers: { "Content-Type": type } });
    });
    const gateway = await startGateway(upstream.url, {
      env: { MCP_POLICY_FILE: policyPath },
      signIn: false,
    });
    gateway.t.upstream.user = { id: 77, username: "grace" };
    const { access_token } = await issueTokens(gateway.t);
    try {
      const p = { gateway, accessToken: access_token } as PolicyGateway;
      const { response, text } = await rpc(p, "tools/list");
      if (type === "text/html") {
        assert.equal(response.status, 502, text);
      } else {
        assert.equal(response.status, 200, type);
        assert.deepEqual(JSON.parse(text).result.tools, [{ name: "read_file" }], type);
      }
    } finally {
      await gateway.close();
      await upstream.close();
    }
  }
  await Deno.remove(policyPath);
});

Deno.test("policy: a filtered JSON list carries the MCP server's Content-Type alone", async () => {
  const p = await policyGateway(ISSUE_POLICY, "grace");
  try {
    const { response } = await rpc(p, "tools/list");
    assert.equal(response.status, 200);
    // Rebuilt from text, the answer must not gain the text/plain type a string body brings.
    assert.match(response.headers.get("content-type") ?? "", /^application\/json(;|$)/);
    assert.doesNotMatch(response.headers.get("content-type") ?? "", /text\/plain/);
  } finally {
    await p.close();
  }
});

Deno.test("policy: tools/list answers only what the account may call (event stream)", async () => {
  const p = await policyGateway(ISSUE_POLICY, "ada", {}, { sse: true });
  try {
    const { response, text, body } = await rpc(p, "tools/list");
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "text/event-stream");
    assert.deepEqual(
      body.result.tools.map((tool: { name: string }) => tool.name),
      ["delete_project", "merge_request", "read_file"],
    );
    assert.equal(body.result.cacheScope, "private", "a list that could have been cut is per user");
    // Other events pass as they came; the answer keeps its event name and id (bound to the
    // session it went to).
    assert.ok(text.startsWith('event: message\ndata: {"jsonrpc":"2.0","method":"notifications'));
    assert.match(text, /event: message\nid: 7~[\w-]{22}\ndata: /);
  } finally {
    await p.close();
  }
  const mallory = await policyGateway(ISSUE_POLICY, "mallory", {}, { sse: true });
  try {
    const { body } = await rpc(mallory, "tools/list");
    assert.deepEqual(body.result.tools, []);
  } finally {
    await mallory.close();
  }
});

Deno.test("policy: without MCP_POLICY_FILE every call passes and lists are untouched", async () => {
  const upstream = mcpServer();
  const gateway = await startGateway(upstream.url);
  try {
    const p = { gateway, accessToken: gateway.accessToken } as PolicyGateway;
    assert.equal((await callTool(p, "delete_project")).body.result !== undefined, true);
    const { result } = (await rpc(p, "tools/list")).body;
    assert.deepEqual([result.tools.length, result.cacheScope], [4, "public"]);
    assert.equal(auditLines(gateway.lines)[0].policy, undefined);
  } finally {
    await gateway.close();
    await upstream.close();
  }
});

Deno.test("policy: a reload takes the new file; a bad new file keeps the policy in force", async () => {
  const p = await policyGateway(ISSUE_POLICY, "grace");
  try {
    assert.match((await callTool(p, "delete_project")).body.error.message, /not allowed/);
    await Deno.writeTextFile(p.policyPath, JSON.stringify({ default: "allow", rules: [] }));
    assert.equal(p.gateway.t.deps.callPolicy.reload().kind, "reloaded");
    assert.equal((await callTool(p, "delete_project")).body.result !== undefined, true);
    await Deno.writeTextFile(p.policyPath, `{"default":"deny","rulez":[]}`);
    const kept = p.gateway.t.deps.callPolicy.reload();
    assert.equal(kept.kind, "kept");
    assert.match(kept.kind === "kept" ? kept.problem : "", /unknown key "rulez"/);
    assert.equal((await callTool(p, "delete_project")).body.result !== undefined, true);
  } finally {
    await p.close();
  }
});

Deno.test("policy: a file that does not parse, names an unknown key or a bad pattern stops start-up", async () => {
  const env = (path: string) => ({ MCP_POLICY_FILE: path, JWT_SECRET: TEST_SECRET });
  const cases: [unknown, RegExp][] = [
    ["{ not json", /not JSON/],
    [
      { rules: [{ tools: ["x"], allow: { users: ["ada"] }, when: 1 }] },
      /rule 0 has an unknown key "when"/,
    ],
    [{ rules: [{ tools: ["bad name"], deny: { users: ["ada"] } }] }, /invalid pattern "bad name"/],
    [{ rules: [{ tools: [""], deny: { users: ["ada"] } }] }, /invalid pattern ""/],
    [{ default: "maybe" }, /"default" must be "allow" or "deny"/],
    [{ rules: [{ tools: ["x"], allow: { groups: ["acme:boss"] } }] }, /unknown role "boss"/],
    [{ rules: [{ tools: ["x"], allow: {}, deny: {} }] }, /either "allow" or "deny"/],
  ];
  for (const [policy, problem] of cases) {
    const path = await writePolicy(policy);
    try {
      assert.throws(() => loadConfig(env(path)), (error: Error) => {
        assert.match(error.message, new RegExp(`^MCP_POLICY_FILE: ${path}: `));
        assert.match(error.message, problem);
        assert.ok(!error.message.includes("\n"));
        return true;
      });
    } finally {
      await Deno.remove(path);
    }
  }
  assert.throws(() => loadConfig(env("/nonexistent/policy.json")), /cannot read the file/);
});

Deno.test("policy: naming groups needs read_api or api, as ALLOWED_GITLAB_GROUPS does", async () => {
  const path = await writePolicy(ISSUE_POLICY);
  try {
    assert.throws(
      () => loadConfig({ MCP_POLICY_FILE: path, GITLAB_SCOPES: "read_user" }),
      /^ConfigError: MCP_POLICY_FILE: needs read_api or api in GITLAB_SCOPES/,
    );
    const usersOnly = await writePolicy({ rules: [{ tools: ["*"], deny: { users: ["x"] } }] });
    loadConfig({ MCP_POLICY_FILE: usersOnly, GITLAB_SCOPES: "read_user" });
    await Deno.remove(usersOnly);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("policy: SIGHUP reloads the file in a running service; a bad file is logged and kept", {
  ignore: Deno.build.os === "windows",
}, async () => {
  const path = await writePolicy(ISSUE_POLICY);
  const service = await spawnService({
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
    MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
    MCP_POLICY_FILE: path,
  });
  try {
    await Deno.writeTextFile(path, "{ broken");
    service.signal("SIGHUP");
    await waitFor(() => service.logs.some((line) => line.includes("not reloaded")));
    const kept = JSON.parse(service.logs.find((line) => line.includes("not reloaded"))!);
    assert.equal(kept.level, "error");
    assert.match(kept.message, new RegExp(`${path}: not JSON`));
    await Deno.writeTextFile(path, JSON.stringify({ default: "deny", rules: [] }));
    service.signal("SIGHUP");
    await waitFor(() => service.logs.some((line) => line.includes("MCP_POLICY_FILE reloaded")));
    assert.equal(await service.stop(), 0);
  } finally {
    await service.stop();
    await Deno.remove(path);
  }
});
