/**
 * Gateway mode: the header firewall, both ways. Hop-by-hop headers, GitLab credentials and
 * proxy headers a client sends, the MCP server's cookies and internal headers, CORS (preflight
 * included) and compressed bodies.
 */

import { BROKEN_OFF_ANSWER, startRawServer, SWITCHING_PROTOCOLS_ANSWER } from "./_raw_http.ts";
import assert from "node:assert/strict";
import { echo, gatewayApp, MCP, mcpRequest, startScripted } from "./_gateway.ts";
import { boundEventId } from "./_gateway_mcp.ts";

Deno.test("gateway: hop-by-hop headers are not forwarded, either way", async () => {
  const upstream = startScripted((request) =>
    Response.json(Object.fromEntries(request.headers), {
      headers: {
        Connection: "x-hop-response",
        "X-Hop-Response": "1",
        "Keep-Alive": "timeout=5",
        "Proxy-Authenticate": "Basic",
      },
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, {
      headers: {
        Connection: "keep-alive, X-Hop-Request",
        "X-Hop-Request": "1",
        "Keep-Alive": "timeout=5",
        "Proxy-Authorization": "Basic cHJveHk6cHJveHk=",
        "Proxy-Connection": "keep-alive",
        TE: "trailers",
        Trailer: "Expires",
        Upgrade: "websocket",
      },
      body: "{}",
    });
    const seen: Record<string, string> = await response.json();
    for (
      const name of [
        "x-hop-request",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
      ]
    ) {
      assert.equal(seen[name], undefined, `${name} reached the MCP server`);
    }
    assert.notEqual(seen.connection?.toLowerCase().includes("x-hop-request"), true);
    assert.equal(seen.host, new URL(upstream.url).host);
    for (const name of ["connection", "x-hop-response", "keep-alive", "proxy-authenticate"]) {
      assert.equal(response.headers.get(name), null, `${name} reached the client`);
    }
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: OPTIONS is a CORS preflight answered without authentication", async () => {
  const upstream = startScripted(echo);
  const { t } = await gatewayApp(upstream.url);
  try {
    const response = await t.app(
      new Request(MCP, {
        method: "OPTIONS",
        headers: {
          Origin: "https://client.example",
          "Access-Control-Request-Method": "POST",
          "Access-Control-Request-Headers": "authorization, mcp-session-id",
        },
      }),
    );
    assert.equal(response.status, 204);
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
    const allowed = response.headers.get("access-control-allow-headers") ?? "";
    for (
      const name of [
        "Content-Type",
        "Authorization",
        "MCP-Protocol-Version",
        "Mcp-Session-Id",
        "Last-Event-ID",
      ]
    ) {
      assert.ok(allowed.includes(name), `${name} in ${allowed}`);
    }
    assert.match(response.headers.get("access-control-allow-methods") ?? "", /GET.*POST.*DELETE/);
    assert.equal(
      response.headers.get("access-control-expose-headers"),
      "WWW-Authenticate, Mcp-Session-Id, Retry-After",
    );
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a compressed upstream body reaches the client decoded, without Content-Encoding", async () => {
  const upstream = startScripted(() => {
    const body = new Response('{"ok":true}').body!.pipeThrough(new CompressionStream("gzip"));
    return new Response(body, {
      headers: { "Content-Encoding": "gzip", "Content-Type": "application/json" },
    });
  });
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, {
      headers: { "Accept-Encoding": "gzip" },
      body: "{}",
    });
    assert.equal(response.headers.get("content-encoding"), null);
    assert.deepEqual(await response.json(), { ok: true });
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a small gzip answer that decodes to megabytes is relayed as a stream, not held whole", async () => {
  const decoded = `{"jsonrpc":"2.0","id":1,"result":{"text":"${"a".repeat(4 * 1024 * 1024)}"}}`;
  const gzipped = await new Response(
    new Response(decoded).body!.pipeThrough(new CompressionStream("gzip")),
  ).bytes();
  assert.ok(gzipped.length < 64 * 1024, "its Content-Length is far under the 1 MiB read whole");
  const upstream = startScripted(() =>
    new Response(gzipped, {
      headers: { "Content-Encoding": "gzip", "Content-Type": "application/json" },
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    const reader = response.body!.getReader();
    const first = await reader.read();
    assert.ok((first.value?.length ?? 0) <= 1024 * 1024 + 64 * 1024, `${first.value?.length}`);
    let text = new TextDecoder().decode(first.value, { stream: true });
    for (let part = await reader.read(); !part.done; part = await reader.read()) {
      text += new TextDecoder().decode(part.value, { stream: true });
    }
    assert.equal(text.length, decoded.length, "and reaches the client whole");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: an answer the MCP server breaks off is 502, never a server error", async () => {
  const server = startRawServer(BROKEN_OFF_ANSWER, "close");
  const policy = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(policy, JSON.stringify({ default: "allow", rules: [] }));
  const url = server.url.href;
  const plain = await gatewayApp(url);
  // With a policy, a list answer is read whole to be cut: broken off there too.
  const filtering = await gatewayApp(url, { MCP_POLICY_FILE: policy });
  try {
    const answers = [
      await mcpRequest(plain.t, plain.accessToken, { body: "{}" }),
      await mcpRequest(filtering.t, filtering.accessToken, {
        body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
      }),
    ];
    for (const response of answers) {
      assert.equal(response.status, 502);
      assert.equal((await response.json()).error, "bad_gateway");
    }
  } finally {
    plain.t.close();
    filtering.t.close();
    await server.close();
    await Deno.remove(policy);
  }
});

Deno.test("gateway: an MCP server that switches protocols (101) is 502, never a server error or a hang", async () => {
  const server = startRawServer(SWITCHING_PROTOCOLS_ANSWER, "hold");
  const { t, accessToken } = await gatewayApp(server.url.href);
  try {
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(response.status, 502);
    assert.equal((await response.json()).error, "bad_gateway");
  } finally {
    t.close();
    await server.close();
  }
});

Deno.test("gateway: an MCP server answering a status no response can carry (999, 600, 099) is 502, never a server error", async () => {
  for (const status of ["999", "600", "099"]) {
    const answer = `HTTP/1.1 ${status} Odd\r\nContent-Type: application/json\r\n` +
      `Content-Length: 2\r\n\r\n{}`;
    const server = startRawServer(answer, "close");
    const { t, accessToken } = await gatewayApp(server.url.href);
    try {
      const response = await mcpRequest(t, accessToken, {
        headers: { "Content-Type": "application/json" },
        body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      });
      assert.equal(response.status, 502, status);
      assert.equal((await response.json()).error, "bad_gateway", status);
    } finally {
      t.close();
      await server.close();
    }
  }
});

Deno.test("gateway: a header MCP_UPSTREAM_FORWARD_HEADERS names twice, or passed anyway, goes once", async () => {
  const upstream = startScripted((request) => Response.json(Object.fromEntries(request.headers)));
  const { t, accessToken } = await gatewayApp(upstream.url, {
    MCP_UPSTREAM_FORWARD_HEADERS: "X-Tenant, x-tenant, Accept",
  });
  try {
    const response = await mcpRequest(t, accessToken, {
      headers: {
        "X-Tenant": "acme",
        Accept: "application/json",
        "Content-Type": "application/json",
      },
      body: "{}",
    });
    const seen: Record<string, string> = await response.json();
    assert.equal(seen["x-tenant"], "acme");
    assert.equal(seen.accept, "application/json");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a client's JOB-TOKEN, Sudo, Cookie, Forwarded, X-Forwarded-*, X-GitLab-* never reach the MCP server", async () => {
  const upstream = startScripted((request) => Response.json(Object.fromEntries(request.headers)));
  const { t, accessToken } = await gatewayApp(upstream.url, {
    MCP_UPSTREAM_FORWARD_HEADERS: "X-Tenant",
  });
  try {
    const response = await mcpRequest(t, accessToken, {
      headers: {
        "JOB-TOKEN": "client-job-token",
        "PRIVATE-TOKEN": "client-private-token",
        "Deploy-Token": "client-deploy-token",
        Sudo: "root",
        Cookie: "_gitlab_session=stolen",
        Forwarded: "for=1.2.3.4;host=evil.example",
        "X-Forwarded-For": "1.2.3.4",
        "X-Forwarded-Host": "evil.example",
        "X-GitLab-Token-Callback": "https://evil.example/collect",
        "X-Other": "not listed",
        "X-Tenant": "acme",
        Accept: "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-06-18",
        // Bound to this session, as the gateway handed it out; the MCP server gets its own id.
        "Last-Event-ID": await boundEventId(accessToken, "42"),
        "User-Agent": "test-client/1.0",
      },
      body: "{}",
    });
    const seen: Record<string, string> = await response.json();
    // Host, Content-Length, Connection, Accept-Encoding (`identity`) and Via are the gateway's own.
    assert.deepEqual(Object.keys(seen).sort(), [
      "accept",
      "accept-encoding",
      "authorization",
      "connection",
      "content-length",
      "content-type",
      "host",
      "last-event-id",
      "mcp-protocol-version",
      "user-agent",
      "via",
      "x-tenant",
    ]);
    assert.equal(seen.authorization, "Bearer gl-access-0");
    assert.equal(seen["accept-encoding"], "identity");
    assert.equal(seen["x-tenant"], "acme");
    assert.equal(seen["user-agent"], "test-client/1.0");
    assert.equal(seen["last-event-id"], "42");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: an MCP server's Set-Cookie, CORS and internal headers never reach the client", async () => {
  const upstream = startScripted(() => {
    const headers = new Headers({
      "Content-Type": "application/json",
      "Cache-Control": "no-cache",
      "Retry-After": "7",
      Vary: "Accept",
      "MCP-Protocol-Version": "2025-06-18",
      "Access-Control-Allow-Origin": "https://evil.example",
      "Access-Control-Allow-Credentials": "true",
      Location: "https://evil.example/",
      "X-Internal-Host": "mcp-7.internal",
      Server: "internal/1.2",
      "Strict-Transport-Security": "max-age=0",
    });
    headers.append("Set-Cookie", "a=1; Path=/");
    headers.append("Set-Cookie", "b=2; Domain=auth.test");
    return new Response("{}", { status: 200, headers });
  });
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    await response.body?.cancel();
    assert.equal(response.headers.get("set-cookie"), null);
    assert.deepEqual(response.headers.getSetCookie(), []);
    for (const name of ["location", "x-internal-host", "server", "strict-transport-security"]) {
      assert.equal(response.headers.get(name), null, `${name} reached the client`);
    }
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
    assert.equal(response.headers.get("access-control-allow-credentials"), null);
    assert.equal(response.headers.get("content-type"), "application/json");
    assert.equal(response.headers.get("cache-control"), "no-cache");
    assert.equal(response.headers.get("retry-after"), "7");
    assert.equal(response.headers.get("vary"), "Accept");
    assert.equal(response.headers.get("mcp-protocol-version"), "2025-06-18");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: an MCP server's Cache-Control that lets a shared cache keep the answer becomes no-store", async () => {
  let cacheControl = "";
  const upstream = startScripted(() =>
    new Response("{}", {
      headers: { "Content-Type": "application/json", "Cache-Control": cacheControl },
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const relayed = async (sent: string) => {
      cacheControl = sent;
      const response = await mcpRequest(t, accessToken, { body: "{}" });
      await response.body?.cancel();
      return response.headers.get("cache-control");
    };
    // RFC 9111 §3.5: these let a shared cache reuse an answer to a request with Authorization.
    for (const shared of ["public, max-age=600", "max-age=60, S-MAXAGE=60", "must-revalidate"]) {
      assert.equal(await relayed(shared), "no-store", shared);
    }
    for (const own of ["no-cache", "private, max-age=60", "no-store", "max-age=0"]) {
      assert.equal(await relayed(own), own, own);
    }
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a relayed answer carries the service's own headers once each (security, request id, CORS)", async () => {
  for (const type of ["application/json", "text/event-stream", "text/plain"]) {
    const upstream = startScripted(() =>
      new Response(type === "text/event-stream" ? "data: {}\n\n" : "{}", {
        headers: { "Content-Type": type, "X-Frame-Options": "ALLOWALL" },
      })
    );
    const { t, accessToken } = await gatewayApp(upstream.url);
    try {
      const response = await mcpRequest(t, accessToken, { body: "{}" });
      await response.body?.cancel();
      assert.equal(response.headers.get("x-content-type-options"), "nosniff", type);
      assert.equal(response.headers.get("x-frame-options"), "DENY", type);
      assert.equal(response.headers.get("referrer-policy"), "no-referrer", type);
      assert.match(response.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/, type);
      assert.equal(response.headers.get("access-control-allow-origin"), "*", type);
      assert.equal(
        response.headers.get("access-control-expose-headers"),
        "WWW-Authenticate, Mcp-Session-Id, Retry-After",
        type,
      );
    } finally {
      t.close();
      await upstream.close();
    }
  }
});
