/**
 * Issue 21, parts 1 and 2, over real HTTP: the gateway carries revision 2026-07-28's request
 * metadata headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) byte for byte, refuses a request
 * whose headers disagree with its body (400, JSON-RPC -32020) before the MCP server sees it,
 * still carries earlier revisions (batches, client responses) as before, relays
 * `X-Accel-Buffering` and `Allow`, answers CORS preflights for the new headers, never passes the
 * client's query string, and writes one audit line per MCP message.
 */

import assert from "node:assert/strict";
import {
  auditLines,
  modernBody,
  type ScriptedUpstream,
  startGateway,
  startScripted,
} from "./_gateway_mcp.ts";
import { MAX_MCP_BODY_BYTES } from "../src/gateway/request_body.ts";

/** Answers with the headers and body it received, and the query string. */
const echoHeaders = async (request: Request) =>
  Response.json({
    headers: Object.fromEntries(request.headers),
    body: await request.text(),
    search: new URL(request.url).search,
  });

async function withGateway(
  handler: (request: Request) => Response | Promise<Response>,
  fn: (
    g: Awaited<ReturnType<typeof startGateway>>,
    upstream: ScriptedUpstream,
  ) => Promise<void>,
  options: { env?: Record<string, string>; upstreamPath?: string } = {},
): Promise<void> {
  const upstream = startScripted(handler, options.upstreamPath);
  const g = await startGateway(upstream.url, { env: options.env });
  try {
    await fn(g, upstream);
  } finally {
    await g.close();
    await upstream.close();
  }
}

function post(
  g: { mcpUrl: string; accessToken: string },
  body: string,
  headers: Record<string, string> = {},
  url = g.mcpUrl,
): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${g.accessToken}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      ...headers,
    },
    body,
  });
}

const MODERN = { "MCP-Protocol-Version": "2026-07-28" };

Deno.test("gateway 2026-07-28: Mcp-Method, Mcp-Name and every Mcp-Param-* reach the MCP server byte for byte", async () => {
  await withGateway(echoHeaders, async (g) => {
    const greeting = "=?base64?SGVsbG8sIOS4lueVjA==?=";
    const response = await post(
      g,
      modernBody(1, "tools/call", { name: "execute_sql", arguments: { region: "us-west1" } }),
      {
        ...MODERN,
        "mcp-method": "tools/call",
        "MCP-NAME": "execute_sql",
        "Mcp-Param-Region": "us-west1",
        "mcp-param-greeting": greeting,
        "Mcp-Param-Text": "=?base64?IHBhZGRlZCA=?=",
        // A tool may call a parameter anything: this is a parameter, not a credential.
        "Mcp-Param-Authorization": "not-a-credential",
      },
    );
    assert.equal(response.status, 200);
    const { headers } = await response.json();
    assert.equal(headers["mcp-method"], "tools/call");
    assert.equal(headers["mcp-name"], "execute_sql");
    assert.equal(headers["mcp-protocol-version"], "2026-07-28");
    assert.equal(headers["mcp-param-region"], "us-west1");
    assert.equal(headers["mcp-param-greeting"], greeting);
    assert.equal(headers["mcp-param-text"], "=?base64?IHBhZGRlZCA=?=");
    assert.equal(headers["mcp-param-authorization"], "not-a-credential");
    assert.equal(headers["authorization"], "Bearer gl-access-0");
  });
});

Deno.test("gateway 2026-07-28: credentials never pass, whatever the Mcp-Param headers", async () => {
  await withGateway(echoHeaders, async (g) => {
    const response = await post(g, modernBody(2, "tools/list"), {
      ...MODERN,
      "Mcp-Method": "tools/list",
      "Private-Token": "glpat-client",
      "Job-Token": "job-client",
      "Deploy-Token": "deploy-client",
      Sudo: "root",
      Cookie: "_gitlab_session=abc",
      "Mcp-Param-Region": "eu",
    });
    assert.equal(response.status, 200);
    const { headers } = await response.json();
    for (const name of ["private-token", "job-token", "deploy-token", "sudo", "cookie"]) {
      assert.equal(headers[name], undefined, name);
    }
    assert.equal(headers["authorization"], "Bearer gl-access-0");
    assert.equal(headers["mcp-param-region"], "eu");
  });
});

/** Each: headers that do not go with the body; none may reach the MCP server. */
const MISMATCHES: { what: string; body: string; headers: Record<string, string> }[] = [
  {
    what: "Mcp-Method disagrees",
    body: modernBody(7, "tools/call", { name: "a" }),
    headers: { ...MODERN, "Mcp-Method": "tools/list", "Mcp-Name": "a" },
  },
  {
    what: "Mcp-Name disagrees",
    body: modernBody(7, "tools/call", { name: "delete_everything" }),
    headers: { ...MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "read_only" },
  },
  {
    what: "Mcp-Name's Base64 value decodes to another name",
    body: modernBody(7, "prompts/get", { name: "secret" }),
    // "public"
    headers: { ...MODERN, "Mcp-Method": "prompts/get", "Mcp-Name": "=?base64?cHVibGlj?=" },
  },
  {
    what: "Mcp-Name's Base64 value is broken",
    body: modernBody(7, "resources/read", { uri: "file:///a" }),
    headers: { ...MODERN, "Mcp-Method": "resources/read", "Mcp-Name": "=?base64?***?=" },
  },
  {
    what: "Mcp-Method is missing",
    body: modernBody(7, "server/discover"),
    headers: { ...MODERN },
  },
  {
    what: "Mcp-Name is missing on tools/call",
    body: modernBody(7, "tools/call", { name: "a" }),
    headers: { ...MODERN, "Mcp-Method": "tools/call" },
  },
  {
    what: "MCP-Protocol-Version is missing though the body names 2026-07-28",
    body: modernBody(7, "tools/list"),
    headers: { "Mcp-Method": "tools/list" },
  },
  {
    what: "MCP-Protocol-Version disagrees with the body",
    body: modernBody(7, "tools/list"),
    headers: { "MCP-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/list" },
  },
  {
    what: "an earlier revision's Mcp-Method disagrees",
    body: '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a"}}',
    headers: { "MCP-Protocol-Version": "2025-06-18", "Mcp-Method": "ping" },
  },
  {
    what: "an earlier revision's Mcp-Name disagrees, without Mcp-Method",
    body: '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a"}}',
    headers: { "MCP-Protocol-Version": "2025-06-18", "Mcp-Name": "b" },
  },
  {
    what: "a plain Mcp-Name carries what only its Base64 form may (a byte outside ASCII)",
    body: modernBody(7, "tools/call", { name: "caf\u00e9" }),
    headers: { ...MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "caf\u00e9" },
  },
];

Deno.test("gateway 2026-07-28: headers that disagree with the body, or are missing, get 400 -32020 and never reach the MCP server", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    for (const { what, body, headers } of MISMATCHES) {
      const response = await post(g, body, headers);
      assert.equal(response.status, 400, what);
      assert.match(response.headers.get("content-type") ?? "", /^application\/json/, what);
      const answer = await response.json();
      assert.equal(answer.jsonrpc, "2.0", what);
      assert.equal(answer.id, 7, what);
      assert.equal(answer.error.code, -32020, what);
      assert.equal(typeof answer.error.message, "string", what);
    }
    assert.equal(upstream.requests.length, 0);
  });
});

Deno.test("gateway 2026-07-28: a body that is not JSON-RPC gets -32020 with a null id when its headers are required", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const response = await post(
      g,
      JSON.stringify({ jsonrpc: "2.0", method: "tools/call", id: null, params: { name: "x" } }),
      { ...MODERN, "Mcp-Method": "tools/call" },
    );
    assert.equal(response.status, 400);
    assert.deepEqual((await response.json()).id, null);
    assert.equal(upstream.requests.length, 0);
  });
});

Deno.test("gateway: a batch with request metadata headers, or of 2026-07-28, gets -32020 with a null id", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const call = (name: string) =>
      `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"${name}"}}`;
    const cases: [string, Record<string, string>][] = [
      [`[${call("delete_everything")}]`, { "Mcp-Method": "tools/list" }],
      [`[${call("delete_everything")}]`, { "Mcp-Name": "read_only" }],
      [`[${call("a")}]`, MODERN],
      [`[${modernBody(1, "tools/call", { name: "a" })}]`, {}],
    ];
    for (const [body, headers] of cases) {
      const response = await post(g, body, headers);
      assert.equal(response.status, 400, `${body} ${JSON.stringify(headers)}`);
      const answer = await response.json();
      assert.deepEqual([answer.id, answer.error.code], [null, -32020], body);
    }
    assert.equal(upstream.requests.length, 0);
  });
});

Deno.test("gateway: a chunked POST is read and checked like any other", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const chunked = (text: string) =>
      new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(text));
          controller.close();
        },
      });
    const send = (body: string, headers: Record<string, string>) =>
      fetch(g.mcpUrl, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${g.accessToken}`,
          "Content-Type": "application/json",
          ...headers,
        },
        body: chunked(body),
      });
    // The body says 2026-07-28, the only header an earlier revision: the versions disagree.
    const refused = await send(modernBody(7, "tools/list"), {
      "MCP-Protocol-Version": "2025-11-25",
    });
    assert.equal(refused.status, 400);
    assert.equal((await refused.json()).error.code, -32020);
    assert.equal(upstream.requests.length, 0);

    const body = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a"}}';
    const carried = await send(body, { "MCP-Protocol-Version": "2025-11-25" });
    assert.equal(carried.status, 200);
    assert.equal((await carried.json()).body, body);
    const audit = auditLines(g.lines).at(-1);
    assert.deepEqual([audit?.method, audit?.name], ["tools/call", "a"], "the audit line names it");
  });
});

Deno.test("gateway 2026-07-28: headers that agree pass, a Base64 Mcp-Name compared decoded", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const name = "Hello, 世界";
    const encoded = `=?base64?${btoa(String.fromCharCode(...new TextEncoder().encode(name)))}?=`;
    const cases: [string, Record<string, string>][] = [
      [modernBody(1, "tools/call", { name }), { "Mcp-Method": "tools/call", "Mcp-Name": encoded }],
      [
        modernBody(2, "resources/read", { uri: "file:///x.json" }),
        { "Mcp-Method": "resources/read", "Mcp-Name": "file:///x.json" },
      ],
      [modernBody(3, "server/discover"), { "Mcp-Method": "server/discover" }],
      [modernBody(4, "subscriptions/listen"), { "Mcp-Method": "subscriptions/listen" }],
    ];
    for (const [body, headers] of cases) {
      const response = await post(g, body, { ...MODERN, ...headers });
      assert.equal(response.status, 200, body);
      assert.equal((await response.json()).body, body, "the very same bytes");
    }
    assert.equal(upstream.requests.length, cases.length);
  });
});

Deno.test("gateway: earlier revisions are carried as before: no metadata headers, batches, client responses", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const bodies = [
      '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}',
      '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a"}}',
      '[{"jsonrpc":"2.0","id":3,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/initialized"}]',
      '{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[]}}',
      "not json at all",
    ];
    for (const body of bodies) {
      const response = await post(g, body, { "MCP-Protocol-Version": "2025-03-26" });
      assert.equal(response.status, 200, body);
      assert.equal((await response.json()).body, body);
    }
    assert.equal(upstream.requests.length, bodies.length);
  });
});

Deno.test("gateway: a POST body over the limit is 413 and never reaches the MCP server", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const response = await post(g, "x".repeat(MAX_MCP_BODY_BYTES + 1));
    assert.equal(response.status, 413);
    await response.body?.cancel();
    assert.equal(upstream.requests.length, 0);
  });
});

/** A POST body's head and first part; the rest never comes. */
interface UnfinishedUpload {
  headers: string[];
  firstPart: string;
}

const FIRST_PART = '{"jsonrpc":"2.0",';
/** A body of declared length that stops after its first part. */
const DECLARED_UPLOAD: UnfinishedUpload = {
  headers: ["Content-Length: 1000"],
  firstPart: FIRST_PART,
};
/** A chunked 2026-07-28 body that stops after its first chunk. */
const CHUNKED_UPLOAD: UnfinishedUpload = {
  headers: [
    "MCP-Protocol-Version: 2026-07-28",
    "Mcp-Method: tools/call",
    "Transfer-Encoding: chunked",
  ],
  firstPart: `${FIRST_PART.length.toString(16)}\r\n${FIRST_PART}\r\n`,
};

Deno.test("gateway: a POST body of declared length not received within MCP_UPSTREAM_TIMEOUT_MS is 408, not kept alive, and never reaches the MCP server", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const received = await stalledUpload(g, DECLARED_UPLOAD);
    assert.match(received, /^HTTP\/1\.1 408 /, received || "no answer");
    assert.match(received, /^connection: close\r$/im);
    assert.equal(upstream.requests.length, 0);
  }, { env: { MCP_UPSTREAM_TIMEOUT_MS: "300" } });
});

Deno.test("gateway: a chunked 2026-07-28 POST body not received within MCP_UPSTREAM_TIMEOUT_MS is 408 and never reaches the MCP server", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const received = await stalledUpload(g, CHUNKED_UPLOAD);
    assert.match(received, /^HTTP\/1\.1 408 /, received || "no answer");
    assert.equal(upstream.requests.length, 0);
  }, { env: { MCP_UPSTREAM_TIMEOUT_MS: "300" } });
});

Deno.test("gateway: a client that leaves mid-body is logged 400 (never a server error), and nothing reaches the MCP server", async () => {
  for (const upload of [DECLARED_UPLOAD, CHUNKED_UPLOAD]) {
    await withGateway(echoHeaders, async (g, upstream) => {
      (await startUpload(g, upload)).close();
      const logged = await requestLine(g.lines, new URL(g.mcpUrl).pathname);
      assert.equal(logged.status, 400, `${upload.headers.join(", ")}: ${JSON.stringify(logged)}`);
      assert.deepEqual(g.lines.filter((line) => line.level === "error"), []);
      assert.equal(upstream.requests.length, 0);
    });
  }
});

/** The first request line for `path` among `lines`, once it has been written (within 5 s). */
async function requestLine(
  lines: Record<string, unknown>[],
  path: string,
): Promise<Record<string, unknown>> {
  for (let waited = 0; waited < 5_000; waited += 10) {
    const line = lines.find((line) => line.message === "request" && line.path === path);
    if (line) return line;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error("no request line within 5 s");
}

/** A raw connection that has sent an authorized JSON POST's head and `upload`'s first part. */
async function startUpload(
  g: { mcpUrl: string; accessToken: string },
  upload: UnfinishedUpload,
): Promise<Deno.Conn> {
  const url = new URL(g.mcpUrl);
  const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
  const head = [
    `POST ${url.pathname} HTTP/1.1`,
    `Host: ${url.host}`,
    `Authorization: Bearer ${g.accessToken}`,
    "Content-Type: application/json",
    ...upload.headers,
    "",
    "",
  ].join("\r\n");
  await conn.write(new TextEncoder().encode(`${head}${upload.firstPart}`));
  return conn;
}

/** The answer to `upload`, which stops after its first part. */
async function stalledUpload(
  g: { mcpUrl: string; accessToken: string },
  upload: UnfinishedUpload,
): Promise<string> {
  const conn = await startUpload(g, upload);
  try {
    return await readResponse(conn);
  } finally {
    try {
      conn.close();
    } catch { /* closed by the timer */ }
  }
}

/** The server's first response, whole (by its content-length), or what came in 10 s. */
async function readResponse(conn: Deno.Conn): Promise<string> {
  const decoder = new TextDecoder();
  const buffer = new Uint8Array(4096);
  const timer = setTimeout(() => conn.close(), 10_000);
  let text = "";
  try {
    while (!isWholeResponse(text)) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) break;
      text += decoder.decode(buffer.subarray(0, n), { stream: true });
    }
  } finally {
    clearTimeout(timer);
  }
  return text;
}

function isWholeResponse(text: string): boolean {
  const end = text.indexOf("\r\n\r\n");
  const length = text.match(/^content-length: (\d+)\r$/im);
  return end >= 0 && length !== null && text.length >= end + 4 + Number(length[1]);
}

Deno.test("gateway: X-Accel-Buffering relayed; Allow relayed on a 405 only", async () => {
  await withGateway(
    (request) =>
      request.method === "GET"
        ? new Response(null, { status: 405, headers: { Allow: "POST" } })
        : Response.json({}, { headers: { "X-Accel-Buffering": "no", Allow: "GET, POST" } }),
    async (g) => {
      const ok = await post(g, '{"jsonrpc":"2.0","id":1,"method":"ping"}');
      await ok.body?.cancel();
      assert.equal(ok.headers.get("x-accel-buffering"), "no");
      assert.equal(ok.headers.get("allow"), null);
      const refused = await fetch(g.mcpUrl, {
        headers: { Authorization: `Bearer ${g.accessToken}`, Accept: "text/event-stream" },
      });
      await refused.body?.cancel();
      assert.equal(refused.status, 405);
      assert.equal(refused.headers.get("allow"), "POST");
    },
  );
});

Deno.test("gateway: CORS preflight allows Mcp-Method, Mcp-Name and the Mcp-Param-* headers asked for", async () => {
  await withGateway(echoHeaders, async (g, upstream) => {
    const response = await fetch(g.mcpUrl, {
      method: "OPTIONS",
      headers: {
        Origin: "https://client.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers":
          "authorization,content-type,mcp-method,mcp-name,mcp-param-region,mcp-param-tenant-id,x-other",
      },
    });
    await response.body?.cancel();
    assert.equal(response.status, 204);
    const allowed = (response.headers.get("access-control-allow-headers") ?? "").toLowerCase()
      .split(",").map((name) => name.trim());
    for (
      const name of [
        "authorization",
        "content-type",
        "mcp-protocol-version",
        "mcp-session-id",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-param-region",
        "mcp-param-tenant-id",
      ]
    ) {
      assert.ok(allowed.includes(name), `${name} in ${allowed}`);
    }
    assert.ok(!allowed.includes("x-other"));
    assert.match(response.headers.get("vary") ?? "", /Access-Control-Request-Headers/i);
    assert.equal(upstream.requests.length, 0);
  });
});

Deno.test("gateway: the client's query string never reaches the MCP server", async () => {
  await withGateway(echoHeaders, async (g) => {
    const response = await post(
      g,
      '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      {},
      `${g.mcpUrl}?private_token=glpat-x&sudo=root`,
    );
    assert.equal(response.status, 200);
    assert.equal((await response.json()).search, "");
  });
});

Deno.test("gateway: MCP_UPSTREAM_URL's own query is kept", async () => {
  await withGateway(echoHeaders, async (g) => {
    const response = await post(
      g,
      '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      {},
      `${g.mcpUrl}?x=1`,
    );
    assert.equal((await response.json()).search, "?tenant=a");
  }, { upstreamPath: "/mcp?tenant=a" });
});

Deno.test("gateway audit: one mcp line per message with who, what and how, and nothing secret", async () => {
  const answers = (request: Request) =>
    request.text().then((text) =>
      text.includes("fails")
        ? Response.json({ jsonrpc: "2.0", id: 2, error: { code: -32602, message: "no" } })
        : Response.json({ jsonrpc: "2.0", id: 1, result: { content: [{ text: "secret-result" }] } })
    );
  await withGateway(answers, async (g) => {
    const call = await post(
      g,
      modernBody(1, "tools/call", { name: "get_weather", arguments: { city: "secret-arg" } }),
      { ...MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "get_weather" },
    );
    await call.text();
    const failing = await post(
      g,
      modernBody(2, "tools/call", { name: "fails", arguments: {} }),
      { ...MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "fails" },
    );
    await failing.text();
    const refused = await post(g, modernBody(3, "tools/call", { name: "x" }), {
      ...MODERN,
      "Mcp-Method": "tools/call",
      "Mcp-Name": "y",
    });
    await refused.text();
    const batch = await post(
      g,
      '[{"jsonrpc":"2.0","id":4,"method":"tools/list"},{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"p"}}]',
    );
    await batch.text();

    const lines = auditLines(g.lines);
    assert.equal(lines.length, 5);
    const [ok, failed, mismatch, first, second] = lines;
    for (const line of lines) {
      assert.equal(line.message, "mcp");
      assert.equal(line.msg, undefined, "one message field");
      assert.equal(line.level, "info");
      assert.equal(typeof line.time, "string");
      assert.equal(typeof line.requestId, "string");
      assert.equal(line.userId, "4242");
      assert.equal(line.username, "ada");
      assert.equal(typeof line.clientId, "string");
      assert.equal(typeof line.sessionId, "string");
      assert.equal(typeof line.ms, "number");
    }
    assert.deepEqual(
      {
        v: ok.protocolVersion,
        m: ok.method,
        n: ok.name,
        id: ok.rpcId,
        s: ok.status,
        e: ok.rpcError,
      },
      { v: "2026-07-28", m: "tools/call", n: "get_weather", id: 1, s: 200, e: false },
    );
    assert.equal(failed.rpcError, true);
    assert.equal(failed.status, 200);
    assert.deepEqual([mismatch.status, mismatch.rpcId, mismatch.name], [400, 3, "x"]);
    assert.equal(first.requestId, second.requestId);
    assert.deepEqual([first.method, first.rpcId], ["tools/list", 4]);
    assert.deepEqual([second.method, second.rpcId, second.name], ["prompts/get", 5, "p"]);

    const text = JSON.stringify(lines);
    for (const secret of ["secret-arg", "secret-result", g.accessToken, "gl-access-0"]) {
      assert.ok(!text.includes(secret), `audit lines hold ${secret}`);
    }
  });
});

Deno.test("gateway audit: AUDIT_LOG=off writes no mcp line", async () => {
  await withGateway(echoHeaders, async (g) => {
    const response = await post(g, '{"jsonrpc":"2.0","id":1,"method":"ping"}');
    await response.text();
    assert.equal(auditLines(g.lines).length, 0);
    assert.ok(g.lines.some((line) => line.message === "request"), "the request line stays");
  }, { env: { AUDIT_LOG: "off" } });
});
