/**
 * The gateway's hop to an `http:` MCP server honours the runtime's proxy variables
 * (`HTTP_PROXY`, `NO_PROXY`, ...) as Deno's `fetch` does for every other request: an operator
 * who routes plain HTTP through a proxy gets the MCP hop routed too.
 */

import assert from "node:assert/strict";
import { postMcpOverHttp, signInOverHttp, spawnWithGitLab } from "./_service.ts";

/** An HTTP forward proxy on loopback: answers MCP requests itself, passes the rest on. */
function startProxy(mcpUrl: string) {
  const seen: { url: string; authorization: string | null }[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    seen.push({ url: request.url, authorization: request.headers.get("authorization") });
    if (request.url === mcpUrl) {
      return Response.json({ jsonrpc: "2.0", id: 1, result: { via: "proxy" } });
    }
    // A forward proxy gets the absolute URL in its request line: anything else (GitLab) goes on.
    const headers = new Headers(request.headers);
    headers.delete("host");
    return fetch(request.url, {
      method: request.method,
      headers,
      body: request.body,
      redirect: "manual",
    });
  });
  return { url: `http://127.0.0.1:${server.addr.port}`, seen, close: () => server.shutdown() };
}

function startMcpServer() {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json({ jsonrpc: "2.0", id: 1, result: { via: "direct" } }),
  );
  return { url: `http://127.0.0.1:${server.addr.port}/mcp`, close: () => server.shutdown() };
}

/**
 * A tools/list through the gateway with `proxyEnv`: to MCP_UPSTREAM_URL at `/mcp`, or with
 * `named`, to a server of MCP_SERVERS_FILE at `/mcp/docs`.
 */
async function callThroughGateway(
  proxyEnv: (proxyUrl: string) => Record<string, string>,
  named = false,
) {
  const mcp = startMcpServer();
  const proxy = startProxy(mcp.url);
  const dir = await Deno.makeTempDir();
  const serversFile = `${dir}/servers.yaml`;
  await Deno.writeTextFile(serversFile, `servers:\n  - name: docs\n    url: ${mcp.url}\n`);
  const { gitlab, service, close } = await spawnWithGitLab("proxy-env-app", {
    ...(named ? { MCP_SERVERS_FILE: serversFile } : { MCP_UPSTREAM_URL: mcp.url }),
    ...proxyEnv(proxy.url),
  });
  try {
    const path = named ? "/mcp/docs" : "/mcp";
    const { access_token } = await signInOverHttp(service.url, gitlab, {
      resource: `${service.url}${path}`,
    });
    const answer = await postMcpOverHttp(service.url, access_token, { method: "tools/list" }, path);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    return { result: answer.body.result, proxied: proxy.seen.filter((s) => s.url === mcp.url) };
  } finally {
    await close();
    await proxy.close();
    await mcp.close();
    await Deno.remove(dir, { recursive: true });
  }
}

for (const variable of ["HTTP_PROXY", "http_proxy", "ALL_PROXY"]) {
  Deno.test(`gateway: ${variable} set, the MCP server is reached through the proxy`, async () => {
    const { result, proxied } = await callThroughGateway((proxy) => ({ [variable]: proxy }));
    assert.deepEqual(result, { via: "proxy" });
    assert.equal(proxied.length, 1);
    // The proxy carries what the MCP server would have got: the user's GitLab token.
    assert.match(proxied[0].authorization ?? "", /^Bearer \S+$/);
  });
}

Deno.test("gateway: HTTP_PROXY set, a server of MCP_SERVERS_FILE is reached through the proxy too", async () => {
  const { result, proxied } = await callThroughGateway((proxy) => ({ HTTP_PROXY: proxy }), true);
  assert.deepEqual(result, { via: "proxy" });
  assert.equal(proxied.length, 1);
});

Deno.test("gateway: NO_PROXY naming the MCP server's host keeps its hop direct", async () => {
  const { result, proxied } = await callThroughGateway((proxy) => ({
    HTTP_PROXY: proxy,
    NO_PROXY: "127.0.0.1",
  }));
  assert.deepEqual(result, { via: "direct" });
  assert.deepEqual(proxied, []);
});

Deno.test("gateway: without proxy variables the MCP server is reached directly", async () => {
  const { result, proxied } = await callThroughGateway(() => ({}));
  assert.deepEqual(result, { via: "direct" });
  assert.deepEqual(proxied, []);
});
