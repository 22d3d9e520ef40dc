/**
 * Gateway mode over real HTTP: the fields a `Connection` header names are this hop's only (RFC
 * 9110 §7.6.1), so they are neither forwarded nor relayed, whichever allow-list names them, and
 * the gateway decides (an `Mcp-Session-Id`'s binding) from what the MCP server is sent; and every
 * request forwarded carries the gateway's `Via` (§7.6.3).
 */

import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { issueTokens, TEST_BASE, type TestApp } from "./_helpers.ts";
import { MCP_POST_HEADERS } from "./_mcp_client.ts";
import { gatewayApp, startScripted } from "./_gateway.ts";

/** An answer as a socket brings it: every header the app sent, none dropped by a client. */
interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/**
 * `t`'s app served on loopback; `send` makes one request on a connection of its own, with
 * exactly the headers given (`Host` the app's own).
 */
function serve(t: TestApp) {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  const send = (method: string, headers: Record<string, string>, body?: string) =>
    new Promise<RawAnswer>((resolve, reject) => {
      const outgoing = httpRequest({
        hostname: "127.0.0.1",
        port: server.addr.port,
        path: "/mcp",
        method,
        agent: false,
        headers: { Host: new URL(TEST_BASE).host, ...headers },
      }, (incoming) => {
        let text = "";
        incoming.setEncoding("utf8");
        incoming.on("data", (chunk: string) => text += chunk);
        incoming.on(
          "end",
          () =>
            resolve({ status: incoming.statusCode ?? 0, headers: incoming.headers, body: text }),
        );
        incoming.on("error", reject);
      });
      outgoing.on("error", reject);
      outgoing.end(body);
    });
  return { send, close: () => server.shutdown() };
}

/**
 * An MCP server handing out `mcp-<n>` to a request without an `Mcp-Session-Id` and answering
 * every request 200 (a DELETE too, as if it ended the session named); records what reached it.
 */
function startSessionServer(answerHeaders: Record<string, string> = {}) {
  let issued = 0;
  return startScripted((request) => {
    const headers = new Headers({ "Content-Type": "application/json", ...answerHeaders });
    if (!request.headers.has("mcp-session-id")) headers.set("Mcp-Session-Id", `mcp-${++issued}`);
    return new Response('{"jsonrpc":"2.0","id":1,"result":{}}', { headers });
  });
}

const PING = '{"jsonrpc":"2.0","id":1,"method":"ping"}';

Deno.test("gateway: a client's fields named in Connection never reach the MCP server, even allow-listed ones", async () => {
  const upstream = startSessionServer();
  const { t, accessToken } = await gatewayApp(upstream.url, {
    MCP_UPSTREAM_FORWARD_HEADERS: "X-Tenant",
  });
  const app = serve(t);
  try {
    const bearer = `Bearer ${accessToken}`;
    const first = await app.send("POST", { ...MCP_POST_HEADERS, Authorization: bearer }, PING);
    assert.equal(first.status, 200, first.body);
    const mcpSessionId = first.headers["mcp-session-id"] as string;
    const sent = {
      ...MCP_POST_HEADERS,
      Authorization: bearer,
      "Mcp-Session-Id": mcpSessionId,
      "MCP-Protocol-Version": "2025-06-18",
      "User-Agent": "test-client/1.0",
      "X-Tenant": "acme",
    };
    // Named in any case and spacing; `Authorization`, named too, is still the gateway's to read.
    const named = await app.send("POST", {
      ...sent,
      Connection: "close, mcp-session-id,User-Agent ,  X-TENANT, authorization",
    }, PING);
    assert.equal(named.status, 200, named.body);
    const seen = upstream.requests.at(-1)!.headers;
    for (const name of ["mcp-session-id", "user-agent", "x-tenant"]) {
      assert.equal(seen.get(name), null, `${name} reached the MCP server`);
    }
    assert.ok(!(seen.get("connection") ?? "").includes("mcp-session-id"));
    assert.equal(seen.get("mcp-protocol-version"), "2025-06-18", "what it does not name passes");
    assert.equal(seen.get("authorization"), "Bearer gl-access-0");

    // The usual `Connection: keep-alive` takes nothing away.
    const kept = await app.send("POST", { ...sent, Connection: "keep-alive" }, PING);
    assert.equal(kept.status, 200, kept.body);
    const keptSeen = upstream.requests.at(-1)!.headers;
    assert.equal(keptSeen.get("mcp-session-id"), mcpSessionId);
    assert.equal(keptSeen.get("user-agent"), "test-client/1.0");
    assert.equal(keptSeen.get("x-tenant"), "acme");
  } finally {
    await app.close();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: an Mcp-Session-Id named in Connection is neither sent nor decided on: the request is sessionless, as the MCP server sees it", async () => {
  const upstream = startSessionServer();
  const { t, accessToken: alice } = await gatewayApp(upstream.url);
  const app = serve(t);
  try {
    const { access_token: mallory } = await issueTokens(t);
    const post = (token: string, more: Record<string, string>) =>
      app.send("POST", { ...MCP_POST_HEADERS, Authorization: `Bearer ${token}`, ...more }, PING);
    const first = await post(alice, {});
    const mcpSessionId = first.headers["mcp-session-id"] as string;
    const owner = await t.store.mcpSessionOwner(mcpSessionId);
    assert.ok(owner);

    // Alice's id, from Mallory's token, named hop-by-hop: it never reaches the MCP server.
    const stolen = await post(mallory, {
      "Mcp-Session-Id": mcpSessionId,
      Connection: "mcp-session-id",
    });
    assert.equal(stolen.status, 200, stolen.body);
    assert.notEqual(stolen.headers["mcp-session-id"], mcpSessionId);
    const withId = upstream.requests.filter((r) => r.headers.get("mcp-session-id") !== null);
    assert.equal(withId.length, 0, "the MCP server never saw Alice's id");

    // Alice's DELETE naming it ends nothing the MCP server was told of: the binding stays.
    const ended = await app.send("DELETE", {
      Authorization: `Bearer ${alice}`,
      "Mcp-Session-Id": mcpSessionId,
      Connection: "mcp-session-id",
    });
    assert.equal(ended.status, 200, ended.body);
    assert.equal(upstream.requests.at(-1)!.headers.get("mcp-session-id"), null);
    assert.equal(await t.store.mcpSessionOwner(mcpSessionId), owner);
    const after = await post(alice, { "Mcp-Session-Id": mcpSessionId });
    assert.equal(after.status, 200, after.body);
  } finally {
    await app.close();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: an MCP server's fields named in Connection never reach the client, even allow-listed ones", async () => {
  const upstream = startSessionServer({
    Connection: "keep-alive, Cache-Control,vary , mcp-session-id",
    "Cache-Control": "no-store",
    Vary: "Accept",
    "MCP-Protocol-Version": "2025-06-18",
  });
  const { t, accessToken } = await gatewayApp(upstream.url);
  const app = serve(t);
  try {
    const answer = await app.send("POST", {
      ...MCP_POST_HEADERS,
      Authorization: `Bearer ${accessToken}`,
    }, PING);
    assert.equal(answer.status, 200, answer.body);
    for (const name of ["cache-control", "vary", "mcp-session-id"]) {
      assert.equal(answer.headers[name], undefined, `${name} reached the client`);
    }
    assert.ok(!String(answer.headers.connection ?? "").toLowerCase().includes("cache-control"));
    assert.equal(answer.headers["mcp-protocol-version"], "2025-06-18");
    assert.equal(answer.headers["content-type"], "application/json");
  } finally {
    await app.close();
    t.close();
    await upstream.close();
  }
});

Deno.test("gateway: every request forwarded carries Via: 1.1 gitlab-mcp-auth; a client's Via only when listed, ours after it", async () => {
  const upstream = startSessionServer({ Via: "1.1 mcp-internal-7" });
  const plain = await gatewayApp(upstream.url);
  const listing = await gatewayApp(upstream.url, { MCP_UPSTREAM_FORWARD_HEADERS: "Via" });
  const plainApp = serve(plain.t);
  const listingApp = serve(listing.t);
  try {
    for (const method of ["POST", "GET", "DELETE"]) {
      const answer = await plainApp.send(method, {
        ...MCP_POST_HEADERS,
        Authorization: `Bearer ${plain.accessToken}`,
        Via: "1.0 fred",
      }, method === "POST" ? PING : undefined);
      assert.equal(answer.status, 200, answer.body);
      assert.equal(upstream.requests.at(-1)!.headers.get("via"), "1.1 gitlab-mcp-auth", method);
      // The MCP server's own Via is not relayed, and the gateway adds none to answers.
      assert.equal(answer.headers.via, undefined, method);
    }
    const listed = await listingApp.send("POST", {
      ...MCP_POST_HEADERS,
      Authorization: `Bearer ${listing.accessToken}`,
      Via: "1.0 fred, 1.1 p.example (Proxy)",
    }, PING);
    assert.equal(listed.status, 200, listed.body);
    assert.equal(
      upstream.requests.at(-1)!.headers.get("via"),
      "1.0 fred, 1.1 p.example (Proxy), 1.1 gitlab-mcp-auth",
    );
  } finally {
    await plainApp.close();
    await listingApp.close();
    plain.t.close();
    listing.t.close();
    await upstream.close();
  }
});
