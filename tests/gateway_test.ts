/**
 * Gateway mode in-process: the real app over an in-memory KV and a fake GitLab, forwarding to
 * MCP servers on loopback (scripted ones, and a real one built with the MCP SDK).
 */

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { decodeJwt, SignJWT } from "jose";
import { createApp, type FetchHandler } from "../src/http/app.ts";
import { createAppDeps } from "../src/deps.ts";
import { silentLogger } from "../src/logger.ts";
import { VERIFIED_TOKEN_TTL_MS } from "../src/gateway/verified_tokens.ts";
import { loadTemplates } from "../src/templates.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  exchange,
  issueCode,
  issueTokens,
  kvText,
  makeTestApp,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { recordsOf } from "../src/store/keys.ts";
import { initializeBody, MCP_POST_HEADERS } from "./_mcp_client.ts";
import { inProcessFetch, startMcpUpstream, type WhoAmI } from "./_mcp_upstream.ts";

const MCP = `${TEST_BASE}/mcp`;
const PRM = `${TEST_BASE}/.well-known/oauth-protected-resource/mcp`;
const OTHER_SECRET = "another-secret-that-is-at-least-32-bytes!!";
const encoder = new TextEncoder();

/** An MCP server on loopback answering with `handler`; counts requests. */
interface ScriptedUpstream {
  url: string;
  requests: Request[];
  close(): Promise<void>;
}

function startScripted(handler: (request: Request) => Response | Promise<Response>) {
  const requests: Request[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    requests.push(request);
    return handler(request);
  });
  const upstream: ScriptedUpstream = {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    requests,
    close: () => server.shutdown(),
  };
  return upstream;
}

/** An app in gateway mode in front of `upstreamUrl`, with a signed-in user. */
async function gatewayApp(
  upstreamUrl: string,
  env: Record<string, string> = {},
): Promise<{ t: TestApp; accessToken: string }> {
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: upstreamUrl, ...env } });
  const { access_token } = await issueTokens(t);
  return { t, accessToken: access_token };
}

function mcpRequest(t: TestApp, token: string | undefined, init: RequestInit = {}) {
  const headers = new Headers(init.headers);
  if (token !== undefined) headers.set("Authorization", `Bearer ${token}`);
  return t.app(new Request(MCP, { method: "POST", ...init, headers }));
}

/** The access token's claims, re-signed with changes (and another secret or issuer). */
async function resign(
  token: string,
  changes: Record<string, unknown>,
  options: { secret?: string; alg?: string } = {},
): Promise<string> {
  const { iat, exp, ...claims } = decodeJwt(token);
  return await new SignJWT({ ...claims, ...changes })
    .setProtectedHeader({ alg: options.alg ?? "HS256", typ: "JWT" })
    // The token's own issue time: the test clock's, not the wall clock's (the guard refuses a
    // token issued in its future).
    .setIssuedAt(iat)
    .setExpirationTime((changes.exp as number | undefined) ?? exp!)
    .sign(encoder.encode(options.secret ?? TEST_SECRET));
}

function unsecured(token: string): string {
  const header = btoa(JSON.stringify({ alg: "none", typ: "JWT" })).replace(/=+$/, "");
  return `${header}.${token.split(".")[1]}.`;
}

/** Makes the session's GitLab token expire within the refresh buffer. */
async function expireGitLabTokenSoon(t: TestApp, accessToken: string): Promise<void> {
  const session = await t.store.getSession(decodeJwt(accessToken).sid as string);
  assert.ok(session);
  const saved = await t.store.saveSession(session, {
    ...session.value,
    upstreamTokenExpiry: t.clock.now() + 60_000,
  });
  assert.ok(saved);
  // A token accepted a moment ago is remembered that long, as the session was then.
  t.clock.advance(VERIFIED_TOKEN_TTL_MS);
}

const echo = async (request: Request) =>
  Response.json({
    authorization: request.headers.get("authorization"),
    privateToken: request.headers.get("private-token"),
    body: await request.text(),
    search: new URL(request.url).search,
  });

/** An event-stream response whose events `produce` sends, closed when it is done. */
function sse(produce: (send: (event: string) => void) => Promise<void>): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      // A client that left makes enqueue throw; the stream is over then anyway.
      produce((event) => controller.enqueue(encoder.encode(event)))
        .then(() => controller.close())
        .catch(() => {});
    },
  });
  return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
}

/** Rejects when `promise` takes longer than `ms` (a buffering proxy would hang instead). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function assertChallenge(response: Response, description?: RegExp): void {
  const challenge = response.headers.get("www-authenticate") ?? "";
  assert.match(
    challenge,
    /^Bearer error="invalid_token", error_description="[^"\\]+", resource_metadata="[^"]+"$/,
  );
  assert.ok(challenge.endsWith(`resource_metadata="${PRM}"`), challenge);
  if (description) assert.match(challenge, description);
}

Deno.test("gateway: forwards with the GitLab token in place of ours, query and body kept", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await t.app(
      new Request(`${MCP}?probe=1`, {
        method: "POST",
        headers: { Authorization: `Bearer ${accessToken}`, "Content-Type": "application/json" },
        body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      }),
    );
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual(await response.json(), {
      authorization: "Bearer gl-access-0",
      privateToken: null,
      body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      search: "?probe=1",
    });
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: MCP_UPSTREAM_TOKEN_HEADER=private-token sends PRIVATE-TOKEN, no Authorization", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url, {
    MCP_UPSTREAM_TOKEN_HEADER: "private-token",
  });
  try {
    const response = await mcpRequest(t, accessToken, {
      // A client-sent PRIVATE-TOKEN never reaches the MCP server either.
      headers: { "PRIVATE-TOKEN": "client-chosen" },
      body: "{}",
    });
    const body = await response.json();
    assert.equal(body.authorization, null);
    assert.equal(body.privateToken, "gl-access-0");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: no Authorization → 401 with a bare resource_metadata challenge", async () => {
  const upstream = startScripted(echo);
  const { t } = await gatewayApp(upstream.url);
  try {
    for (const authorization of [undefined, "Basic dXNlcjpwYXNz"]) {
      const headers: Record<string, string> = authorization ? { Authorization: authorization } : {};
      const response = await t.app(new Request(MCP, { method: "POST", headers, body: "{}" }));
      assert.equal(response.status, 401);
      assert.equal(response.headers.get("www-authenticate"), `Bearer resource_metadata="${PRM}"`);
      assert.match(response.headers.get("access-control-expose-headers") ?? "", /WWW-Authenticate/);
      assert.equal((await response.json()).error, undefined, "no error code without a token");
    }
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: forged, expired, wrong-issuer, alg none and malformed tokens → 401 invalid_token", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const past = Math.floor(t.clock.now() / 1000) - 31;
    const cases: [string, string, RegExp][] = [
      ["forged", await resign(accessToken, {}, { secret: OTHER_SECRET }), /signature/],
      ["expired", await resign(accessToken, { exp: past }), /expired/],
      ["wrong issuer", await resign(accessToken, { iss: "http://evil.test" }), /another server/],
      ["alg none", unsecured(accessToken), /algorithm|malformed/],
      ["HS512", await resign(accessToken, {}, { alg: "HS512" }), /algorithm/],
      ["malformed", "not-a-jwt", /malformed/],
      ["empty", "", /malformed/],
    ];
    for (const [name, token, description] of cases) {
      const response = await mcpRequest(t, token, { body: "{}" });
      assert.equal(response.status, 401, name);
      assertChallenge(response, description);
      assert.equal((await response.json()).error, "invalid_token", name);
    }
    assert.equal(upstream.requests.length, 0, "nothing reached the MCP server");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: expiry has 30 s of leeway, and the previous secret's tokens still count", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url, {
    JWT_SECRET_PREVIOUS: OTHER_SECRET,
  });
  try {
    const justExpired = await resign(accessToken, { exp: Math.floor(t.clock.now() / 1000) - 20 });
    const response = await mcpRequest(t, justExpired, { body: "{}" });
    assert.equal(response.status, 200);
    await response.body?.cancel();

    const oldSecret = await resign(accessToken, {}, { secret: OTHER_SECRET });
    const previous = await mcpRequest(t, oldSecret, { body: "{}" });
    assert.equal(previous.status, 200);
    assert.equal((await previous.json()).authorization, "Bearer gl-access-0");
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a token without mcp:tools → 403 insufficient_scope", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const resourcesOnly = await resign(accessToken, { scope: "mcp:resources" });
    const response = await mcpRequest(t, resourcesOnly, { body: "{}" });
    assert.equal(response.status, 403);
    const challenge = response.headers.get("www-authenticate") ?? "";
    assert.match(challenge, /^Bearer error="insufficient_scope", scope="mcp:tools", /);
    assert.ok(challenge.includes(`resource_metadata="${PRM}"`), challenge);
    assert.equal((await response.json()).error, "insufficient_scope");
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a session revoked on another instance is refused there within one second", async () => {
  const upstream = startScripted(echo);
  const { t: first, accessToken } = await gatewayApp(upstream.url);
  // A second instance of the service on the same KV, with its own memory of accepted tokens.
  const second = createApp(
    createAppDeps(first.config, {
      kv: first.kv,
      clock: first.clock,
      logger: silentLogger,
      templates: loadTemplates(),
      upstream: first.upstream,
    }),
  );
  const call = async (app: FetchHandler) => {
    const response = await app(
      new Request(MCP, {
        method: "POST",
        headers: { Authorization: `Bearer ${accessToken}` },
        body: "{}",
      }),
    );
    await response.body?.cancel();
    return response.status;
  };
  try {
    assert.equal(await call(second), 200);
    const revoked = await first.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: accessToken }),
      }),
    );
    assert.equal(revoked.status, 200);
    assert.equal(await call(first.app), 401, "at once where it was revoked");
    // The other instance accepted the token a moment ago and remembers it for less than 1 s.
    first.clock.advance(VERIFIED_TOKEN_TTL_MS - 1);
    assert.equal(await call(second), 200);
    first.clock.advance(1);
    assert.equal(await call(second), 401, "within one second everywhere");
    assert.equal(upstream.requests.length, 2);
  } finally {
    first.close();
    await upstream.close();
  }
});

Deno.test("gateway: a token accepted for one host is checked anew for another (no BASE_URL)", async () => {
  const upstream = startScripted(echo);
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: upstream.url, BASE_URL: "" } });
  const { access_token } = await issueTokens(t);
  const call = async (origin: string) => {
    const response = await t.app(
      new Request(`${origin}/mcp`, {
        method: "POST",
        headers: { Authorization: `Bearer ${access_token}` },
        body: "{}",
      }),
    );
    await response.body?.cancel();
    return response.status;
  };
  try {
    assert.equal(await call(TEST_BASE), 200);
    assert.equal(await call("http://another-host.test"), 401, "issued by another server");
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a revoked session is refused at once, though its JWT has not expired", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const before = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(before.status, 200);
    await before.body?.cancel();
    const revoked = await t.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: accessToken }),
      }),
    );
    assert.equal(revoked.status, 200);
    const after = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(after.status, 401);
    assertChallenge(after, /revoked or has expired/);
    await after.body?.cancel();
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: a session ended by a replayed code (REVOKE_ON_CODE_REPLAY) is refused at once", async () => {
  const upstream = startScripted(echo);
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: upstream.url, REVOKE_ON_CODE_REPLAY: "true" },
  });
  try {
    const code = await issueCode(t);
    const { access_token: stolen } = await (await exchange(t, code)).json();
    const before = await mcpRequest(t, stolen, { body: "{}" });
    assert.equal(before.status, 200);
    await before.body?.cancel();
    const replay = await exchange(t, code);
    assert.equal(replay.status, 400);
    await replay.body?.cancel();
    const after = await mcpRequest(t, stolen, { body: "{}" });
    assert.equal(after.status, 401, "the token accepted a moment ago is not served from memory");
    await after.body?.cancel();
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: the MCP server unreachable → 502 with a JSON error", async () => {
  const closed = startScripted(echo);
  await closed.close();
  const { t, accessToken } = await gatewayApp(closed.url);
  try {
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(response.status, 502);
    assert.equal((await response.json()).error, "bad_gateway");
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
  } finally {
    t.close();
  }
});

Deno.test("gateway: response headers later than MCP_UPSTREAM_TIMEOUT_MS → 504", async () => {
  const { promise: released, resolve: release } = Promise.withResolvers<void>();
  const upstream = startScripted(async () => {
    await released;
    return new Response("late");
  });
  const { t, accessToken } = await gatewayApp(upstream.url, { MCP_UPSTREAM_TIMEOUT_MS: "150" });
  try {
    const started = performance.now();
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(response.status, 504);
    assert.equal((await response.json()).error, "gateway_timeout");
    assert.ok(performance.now() - started < 5_000);
  } finally {
    release();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: an open event stream outlives MCP_UPSTREAM_TIMEOUT_MS", async () => {
  const upstream = startScripted(() =>
    sse(async (send) => {
      send("id: 1\ndata: early\n\n");
      await new Promise((resolve) => setTimeout(resolve, 500));
      send("id: 2\ndata: late\n\n");
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url, { MCP_UPSTREAM_TIMEOUT_MS: "150" });
  try {
    const response = await mcpRequest(t, accessToken, {
      method: "GET",
      headers: { Accept: "text/event-stream" },
    });
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.match(text, /data: early\n\n.*data: late\n\n$/s);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: Server-Sent Events reach the client one by one", async () => {
  const { promise: firstRead, resolve: readFirst } = Promise.withResolvers<void>();
  const upstream = startScripted(() =>
    sse(async (send) => {
      send("event: message\ndata: one\n\n");
      await firstRead; // the second event exists only once the client has the first
      send("event: message\ndata: two\n\n");
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, {
      method: "GET",
      headers: { Accept: "text/event-stream" },
    });
    assert.equal(response.headers.get("content-type"), "text/event-stream");
    const events = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let received = "";
    while (!received.includes("\n\n")) {
      received += (await within(events.read(), 5_000, "the first event")).value ?? "";
    }
    assert.equal(received, "event: message\ndata: one\n\n");
    readFirst();
    for (;;) {
      const { value, done } = await within(events.read(), 5_000, "the second event");
      if (done) break;
      received += value;
    }
    assert.equal(received, "event: message\ndata: one\n\nevent: message\ndata: two\n\n");
  } finally {
    readFirst();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: the request body streams to the MCP server", async () => {
  const { promise: firstChunkArrived, resolve: firstChunk } = Promise.withResolvers<void>();
  const upstream = startScripted(async (request) => {
    const reader = request.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = (await reader.read()).value ?? "";
    firstChunk();
    for (let part = await reader.read(); !part.done; part = await reader.read()) text += part.value;
    return new Response(text);
  });
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(encoder.encode("first,"));
        await within(firstChunkArrived, 5_000, "the first chunk");
        controller.enqueue(encoder.encode("second"));
        controller.close();
      },
    });
    const response = await mcpRequest(t, accessToken, { body });
    assert.equal(await response.text(), "first,second");
  } finally {
    firstChunk();
    t.close();
    await upstream.close();
  }
});

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

Deno.test("gateway: Mcp-Session-Id and MCP-Protocol-Version pass both ways; DELETE is forwarded", async () => {
  const upstream = startScripted((request) =>
    Response.json(
      {
        method: request.method,
        session: request.headers.get("mcp-session-id"),
        version: request.headers.get("mcp-protocol-version"),
      },
      {
        headers: {
          "Mcp-Session-Id": "session-from-upstream",
          "MCP-Protocol-Version": "2025-06-18",
        },
      },
    )
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const first = await mcpRequest(t, accessToken, { body: "{}" });
    const sessionId = first.headers.get("mcp-session-id");
    assert.equal(sessionId, "session-from-upstream");
    assert.equal(first.headers.get("mcp-protocol-version"), "2025-06-18");
    assert.match(first.headers.get("access-control-expose-headers") ?? "", /Mcp-Session-Id/);
    await first.body?.cancel();
    for (const method of ["POST", "GET", "DELETE"]) {
      const response = await mcpRequest(t, accessToken, {
        method,
        headers: { "Mcp-Session-Id": sessionId!, "MCP-Protocol-Version": "2025-06-18" },
        body: method === "POST" ? "{}" : undefined,
      });
      assert.deepEqual(await response.json(), {
        method,
        session: "session-from-upstream",
        version: "2025-06-18",
      });
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
      "WWW-Authenticate, Mcp-Session-Id",
    );
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: the MCP server's own 401 challenge is replaced by ours", async () => {
  const upstream = startScripted(() =>
    new Response("no", {
      status: 401,
      headers: {
        "WWW-Authenticate":
          'Bearer resource_metadata="https://gitlab.example/.well-known/oauth-protected-resource"',
      },
    })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    const response = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(response.status, 401);
    assertChallenge(response, /refused the GitLab token/);
    await response.body?.cancel();
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

Deno.test("gateway: routing follows the resource URL's path; off without MCP_UPSTREAM_URL", async () => {
  const upstream = startScripted(echo);
  const plain = await makeTestApp();
  const { t, accessToken } = await gatewayApp(upstream.url, {
    MCP_RESOURCE_URL: "https://mcp.example.com/tools/mcp",
  });
  try {
    const off = await plain.app(new Request(MCP, { method: "POST", body: "{}" }));
    assert.equal(off.status, 404);
    await off.body?.cancel();

    const elsewhere = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(elsewhere.status, 404);
    await elsewhere.body?.cancel();
    const response = await t.app(
      new Request(`${TEST_BASE}/tools/mcp`, {
        method: "POST",
        headers: { Authorization: `Bearer ${accessToken}` },
        body: "{}",
      }),
    );
    assert.equal(response.status, 200);
    assert.equal((await response.json()).authorization, "Bearer gl-access-0");
    const anonymous = await t.app(new Request(`${TEST_BASE}/tools/mcp`, { method: "POST" }));
    assert.equal(
      anonymous.headers.get("www-authenticate"),
      'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/tools/mcp"',
    );
    await anonymous.body?.cancel();
  } finally {
    plain.close();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: GitLab refusing the refresh → 401; failing with the token still valid → served", async () => {
  const upstream = startScripted(echo);
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    await expireGitLabTokenSoon(t, accessToken);
    t.upstream.refreshes.push(new UpstreamError("transient", "timeout"));
    const stillValid = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(stillValid.status, 200);
    assert.equal((await stillValid.json()).authorization, "Bearer gl-access-0");

    t.upstream.refreshes.push(new UpstreamError("terminal", "invalid_grant"));
    const refused = await mcpRequest(t, accessToken, { body: "{}" });
    assert.equal(refused.status, 401);
    assertChallenge(refused, /sign in again/);
    await refused.body?.cancel();
    assert.equal(upstream.requests.length, 1);
  } finally {
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: 20 parallel tool calls over the MCP SDK with an expiring GitLab token → one refresh", async () => {
  const upstream = startMcpUpstream();
  const { t, accessToken } = await gatewayApp(upstream.url);
  const client = new Client({ name: "gateway-test", version: "1.0.0" });
  try {
    const transport = new StreamableHTTPClientTransport(new URL(MCP), {
      fetch: inProcessFetch(t.app),
      requestInit: { headers: { Authorization: `Bearer ${accessToken}` } },
    });
    await client.connect(transport);
    assert.equal(transport.sessionId, upstream.sessionIds[0], "Mcp-Session-Id round-trips");

    await expireGitLabTokenSoon(t, accessToken);
    t.upstream.refreshes.push(async () => {
      await new Promise((resolve) => setTimeout(resolve, 100));
      return {
        accessToken: "gl-access-new",
        refreshToken: "gl-refresh-new",
        expiresInSeconds: 7200,
      };
    });
    const results = await Promise.all(
      Array.from({ length: 20 }, () => client.callTool({ name: "whoami" })),
    );
    assert.equal(t.upstream.calls.refresh, 1);
    assert.deepEqual(t.upstream.refreshTokensSeen, ["gl-refresh-0"]);
    for (const result of results) {
      const [content] = result.content as { type: string; text: string }[];
      const seen: WhoAmI = JSON.parse(content.text);
      assert.equal(seen.authorization, "Bearer gl-access-new");
      assert.equal(seen.mcpSessionId, transport.sessionId);
    }
    for (const { headers } of upstream.requests) {
      assert.ok(!headers.get("authorization")?.includes(accessToken), "our JWT never forwarded");
    }
  } finally {
    await client.close();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: without OAuth settings the MCP path answers 500 like every endpoint", async () => {
  const upstream = startScripted(echo);
  const t = await makeTestApp({ configured: false, env: { MCP_UPSTREAM_URL: upstream.url } });
  try {
    const response = await t.app(new Request(MCP, { method: "POST", body: "{}" }));
    assert.equal(response.status, 500);
    assert.deepEqual(await response.json(), {
      error: "server_error",
      error_description: "OAuth not configured",
    });
    assert.equal(upstream.requests.length, 0);
  } finally {
    t.close();
    await upstream.close();
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
        "Last-Event-ID": "42",
        "User-Agent": "test-client/1.0",
      },
      body: "{}",
    });
    const seen: Record<string, string> = await response.json();
    // Host, Content-Length, Accept-Encoding and Accept-Language (`*`) are Deno's fetch's own.
    assert.deepEqual(Object.keys(seen).sort(), [
      "accept",
      "accept-encoding",
      "accept-language",
      "authorization",
      "content-length",
      "content-type",
      "host",
      "last-event-id",
      "mcp-protocol-version",
      "user-agent",
      "x-tenant",
    ]);
    assert.equal(seen.authorization, "Bearer gl-access-0");
    assert.equal(seen["accept-language"], "*");
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

const INITIALIZE = initializeBody("hijack-test");
const MCP_HEADERS = MCP_POST_HEADERS;

/** A JSON-RPC `tools/list` on an MCP session with `token`. */
function toolsList(t: TestApp, token: string, mcpSessionId: string): Promise<Response> {
  return mcpRequest(t, token, {
    headers: {
      ...MCP_HEADERS,
      "Mcp-Session-Id": mcpSessionId,
      "MCP-Protocol-Version": "2025-06-18",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
  });
}

Deno.test("gateway: an Mcp-Session-Id handed to one session, presented with another session's token → 404, never reaches the MCP server", async () => {
  const upstream = startMcpUpstream();
  const { t, accessToken: alice } = await gatewayApp(upstream.url);
  try {
    const { access_token: mallory } = await issueTokens(t);
    const initialized = await mcpRequest(t, alice, { headers: MCP_HEADERS, body: INITIALIZE });
    assert.equal(initialized.status, 200);
    await initialized.body?.cancel();
    const mcpSessionId = initialized.headers.get("mcp-session-id");
    assert.ok(mcpSessionId);
    assert.deepEqual(upstream.sessionIds, [mcpSessionId]);

    const reached = upstream.requests.length;
    const hijack = await toolsList(t, mallory, mcpSessionId);
    assert.equal(hijack.status, 404, await hijack.clone().text());
    assert.equal((await hijack.json()).error, "invalid_request");
    // A made-up id is no better.
    const madeUp = await toolsList(t, alice, crypto.randomUUID());
    assert.equal(madeUp.status, 404);
    await madeUp.body?.cancel();
    // Without a valid token the answer is the 401 challenge, whatever the session id.
    const anonymous = await toolsList(t, "not-a-token", mcpSessionId);
    assert.equal(anonymous.status, 401);
    await anonymous.body?.cancel();
    assert.equal(upstream.requests.length, reached, "the MCP server saw none of them");

    // Its own session goes on; ending it forgets the binding.
    const own = await toolsList(t, alice, mcpSessionId);
    assert.equal(own.status, 200, await own.clone().text());
    await own.body?.cancel();
    const ended = await mcpRequest(t, alice, {
      method: "DELETE",
      headers: { "Mcp-Session-Id": mcpSessionId, "MCP-Protocol-Version": "2025-06-18" },
    });
    assert.equal(ended.status, 200);
    await ended.body?.cancel();
    assert.equal(await t.store.mcpSessionOwner(mcpSessionId), null);
  } finally {
    t.close();
    await upstream.close();
  }
});

/** Runs `test` on a gateway in front of an MCP server that hands out `mcpSessionId` every time. */
async function withSessionIssuingGateway(
  mcpSessionId: string,
  test: (t: TestApp, accessToken: string) => Promise<void>,
): Promise<void> {
  const upstream = startScripted(() =>
    new Response("{}", { headers: { "Mcp-Session-Id": mcpSessionId } })
  );
  const { t, accessToken } = await gatewayApp(upstream.url);
  try {
    await test(t, accessToken);
  } finally {
    t.close();
    await upstream.close();
  }
}

Deno.test("gateway: the MCP session binding is stored hashed and lives as long as an idle session", () =>
  withSessionIssuingGateway("secret-mcp-session-id", async (t, accessToken) => {
    await (await mcpRequest(t, accessToken, { body: "{}" })).body?.cancel();
    const [binding, ...others] = await recordsOf<{ sessionId: string; expiresAt: number }>(
      t.kv,
      "mcp_session",
    );
    assert.equal(others.length, 0);
    assert.ok(!(await kvText(t.kv)).includes("secret-mcp-session-id"));
    assert.equal(binding.value.sessionId, decodeJwt(accessToken).sid);
    assert.equal(binding.value.expiresAt, t.clock.now() + t.config.sessionIdleTtlSeconds * 1000);
    const sent = await mcpRequest(t, accessToken, {
      headers: { "Mcp-Session-Id": "secret-mcp-session-id" },
      body: "{}",
    });
    assert.equal(sent.status, 200);
    await sent.body?.cancel();
    t.clock.advance(t.config.sessionIdleTtlSeconds * 1000 + 1);
    assert.equal(await t.store.mcpSessionOwner("secret-mcp-session-id"), null);
  }));

Deno.test("gateway: an MCP server handing out a session id bound to another session → 502, the id never reaches the client", () =>
  withSessionIssuingGateway("one-id-for-everyone", async (t, alice) => {
    const { access_token: bob } = await issueTokens(t);
    const first = await mcpRequest(t, alice, { body: "{}" });
    assert.equal(first.headers.get("mcp-session-id"), "one-id-for-everyone");
    await first.body?.cancel();
    const second = await mcpRequest(t, bob, { body: "{}" });
    assert.equal(second.status, 502, await second.clone().text());
    assert.equal((await second.json()).error, "bad_gateway");
    assert.equal(second.headers.get("mcp-session-id"), null);
    assert.equal(await t.store.mcpSessionOwner("one-id-for-everyone"), decodeJwt(alice).sid);
  }));

Deno.test("gateway: a binding ended on another instance is refused here within one second, however busy the session", () =>
  withSessionIssuingGateway("ended-elsewhere", async (t, accessToken) => {
    await (await mcpRequest(t, accessToken, { body: "{}" })).body?.cancel();
    // Another instance served the DELETE: the binding is gone from KV, not from our memory.
    await t.store.unbindMcpSession("ended-elsewhere");
    const statuses: number[] = [];
    for (
      let elapsed = 0;
      elapsed < 3 * VERIFIED_TOKEN_TTL_MS;
      elapsed += VERIFIED_TOKEN_TTL_MS / 4
    ) {
      t.clock.advance(VERIFIED_TOKEN_TTL_MS / 4);
      const response = await mcpRequest(t, accessToken, {
        headers: { "Mcp-Session-Id": "ended-elsewhere" },
        body: "{}",
      });
      await response.body?.cancel();
      statuses.push(response.status);
    }
    // A quarter of the TTL apart, each request could otherwise renew what memory holds.
    assert.deepEqual(statuses.slice(4), Array(statuses.length - 4).fill(404), String(statuses));
  }));
