/**
 * MCP_SERVERS_FILE follows its file while the service runs (issue 35 §1, issue 33 §2.3): a
 * changed content is picked up without a signal (the watch's check, called here instead of
 * waiting for its timer), SIGHUP reloads at once; a new server is served (its path and its
 * protected resource metadata), a removed one answers 404, its open streams end and a request it
 * still holds ends with 502 (over http and https), a changed one takes new requests to its new
 * URL while the streams of kept servers go on; a file start-up would refuse (one adding a server
 * at MCP_RESOURCE_URL's path too) changes nothing and is reported in one line. Over real HTTP,
 * with the service as a process where a signal is needed, and SDK v1 and v2 (2026-07-28) clients
 * on an added server.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
} from "@modelcontextprotocol/client";
import { followConfigFiles } from "../src/app/file_reloads.ts";
import { createLogger } from "../src/logger.ts";
import {
  assertError,
  exchange,
  issueCode,
  makeTestApp,
  refresh,
  TEST_BASE,
  type TestApp,
} from "./_helpers.ts";
import { modernBody, startScripted, within } from "./_gateway_mcp.ts";
import { ROUTE_TOOL, startMcpV2Upstream } from "./_mcp_v2_upstream.ts";
import {
  authorizeOverHttp,
  exchangeOverHttp,
  mcpPostInit,
  pollOverHttp,
  type ServiceProcess,
  spawnWithGitLab,
  waitFor,
} from "./_service.ts";
import type { SimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { startDocumentServer } from "./_tls.ts";

const encoder = new TextEncoder();

/** A servers file listing `servers` (name → URL), as YAML. */
function serversYaml(servers: Record<string, string>): string {
  const entries = Object.entries(servers)
    .map(([name, url]) => `  - name: ${name}\n    url: ${url}\n`);
  return entries.length ? `servers:\n${entries.join("")}` : "servers: []\n";
}

/** An MCP server whose every answer is an endless event stream, until the gateway cancels it. */
function streamingUpstream() {
  const streams: ReadableStreamDefaultController<Uint8Array>[] = [];
  let cancelled = 0;
  const upstream = startScripted(() =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(c) {
          streams.push(c);
          c.enqueue(encoder.encode(": open\n\n"));
        },
        cancel() {
          cancelled++;
        },
      }),
      { headers: { "Content-Type": "text/event-stream" } },
    )
  );
  return {
    ...upstream,
    /** Sends `text` on every stream still open. */
    send(text: string) {
      for (const c of streams) {
        try {
          c.enqueue(encoder.encode(text));
        } catch {
          // that stream is over
        }
      }
    },
    cancelled: () => cancelled,
    end() {
      for (const c of streams) {
        try {
          c.close();
        } catch {
          // already over
        }
      }
    },
  };
}

/** Opens a GET event stream at `url` with `token`; returns its reader (after the first chunk). */
async function openGetStream(url: string, token: string) {
  const response = await fetch(url, {
    headers: {
      Authorization: `Bearer ${token}`,
      Accept: "text/event-stream",
      "MCP-Protocol-Version": "2025-11-25",
    },
  });
  if (response.status !== 200) assert.fail(`${response.status}: ${await response.text()}`);
  const reader = response.body!.getReader();
  assert.match(await nextText(reader) ?? "", /: open/);
  return reader;
}

/** Opens a 2026-07-28 `subscriptions/listen` POST stream at `url`; returns its reader. */
async function openPostStream(url: string, token: string) {
  const response = await fetch(url, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": "2026-07-28",
      "Mcp-Method": "subscriptions/listen",
    },
    body: modernBody(1, "subscriptions/listen", { notifications: {} }),
  });
  if (response.status !== 200) assert.fail(`${response.status}: ${await response.text()}`);
  const reader = response.body!.getReader();
  assert.match(await nextText(reader) ?? "", /: open/);
  return reader;
}

/** The next chunk as text; undefined at the end of the stream (or when it broke off). */
async function nextText(reader: ReadableStreamDefaultReader<Uint8Array>) {
  try {
    const { done, value } = await reader.read();
    return done ? undefined : new TextDecoder().decode(value);
  } catch {
    return undefined;
  }
}

async function tokenFor(t: TestApp, resource: string): Promise<string> {
  const code = await issueCode(t, { resource });
  const response = await exchange(t, code);
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()).access_token;
}

async function statusOf(url: string, init?: RequestInit): Promise<number> {
  const response = await fetch(url, init);
  await response.body?.cancel();
  return response.status;
}

Deno.test("servers reload: a changed file is picked up without a signal; a removed server's streams end, a kept one's go on, a changed one takes new requests", async () => {
  const a = streamingUpstream(), b = streamingUpstream(), c = streamingUpstream();
  const dir = await Deno.makeTempDir();
  const file = `${dir}/servers.yaml`;
  await Deno.writeTextFile(file, serversYaml({ a: a.url, b: b.url }));
  const lines: Record<string, unknown>[] = [];
  const t = await makeTestApp({
    env: { MCP_SERVERS_FILE: file },
    logger: createLogger((line) => lines.push(JSON.parse(line))),
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  const url = `http://127.0.0.1:${server.addr.port}`;
  // No timer: the test calls the watch's check where the 5 s timer would.
  const files = followConfigFiles(t.deps, t.deps.logger, {});
  const readers: ReadableStreamDefaultReader<Uint8Array>[] = [];
  try {
    const tokenA = await tokenFor(t, `${TEST_BASE}/mcp/a`);
    const tokenB = await tokenFor(t, `${TEST_BASE}/mcp/b`);
    const streamA = await openGetStream(`${url}/mcp/a`, tokenA);
    const postA = await openPostStream(`${url}/mcp/a`, tokenA);
    const streamB = await openGetStream(`${url}/mcp/b`, tokenB);
    readers.push(streamA, postA, streamB);

    await files.check();
    assert.equal(lines.filter((l) => String(l.message).startsWith("MCP_SERVERS_FILE")).length, 0);

    // a removed, b moved to c's URL, d added: a plain write, no signal.
    await Deno.writeTextFile(file, serversYaml({ b: c.url, d: c.url }));
    await files.check();
    await files.check();
    const reloaded = lines.filter((l) => l.message === "MCP_SERVERS_FILE reloaded");
    assert.equal(reloaded.length, 1);
    assert.equal(reloaded[0].mcpServers, "b,d");
    assert.equal(reloaded[0].removed, "a");
    assert.equal(reloaded[0].changed, "b");
    assert.equal(reloaded[0].added, "d");

    assert.equal(await within(nextText(streamA), 1000, "the removed server's stream"), undefined);
    assert.equal(await within(nextText(postA), 1000, "its POST stream"), undefined);
    assert.equal(a.cancelled(), 2, "the removed server's side is cancelled too");
    b.send("data: still here\n\n");
    assert.equal(await nextText(streamB), "data: still here\n\n", "a kept server's stream goes on");

    const post = (name: string, token: string) =>
      statusOf(`${url}/mcp/${name}`, mcpPostInit(token));
    assert.equal(await post("a", tokenA), 404, "a removed server answers 404");
    const toB = c.requests.length;
    assert.equal(await post("b", tokenB), 200);
    assert.equal(c.requests.length, toB + 1, "a changed server's new requests go to its new URL");
    assert.equal(await statusOf(`${url}/.well-known/oauth-protected-resource/mcp/a`), 404);
    assert.equal(await statusOf(`${url}/.well-known/oauth-protected-resource/mcp/d`), 200);
    await tokenFor(t, `${TEST_BASE}/mcp/d`);
    await assert.rejects(() => tokenFor(t, `${TEST_BASE}/mcp/a`), "a removed server's resource");

    // A file start-up would refuse: one line, however often it is checked; nothing changes.
    await Deno.writeTextFile(file, "servers:\n  - name: b\n    url: ftp://x/mcp\n");
    await files.check();
    await files.check();
    await files.check();
    const refused = lines.filter((l) =>
      String(l.message).startsWith("MCP_SERVERS_FILE not reloaded")
    );
    assert.equal(refused.length, 1);
    assert.match(
      String(refused[0].message),
      /the servers in force stay: .*servers\.yaml: server b url/,
    );
    assert.equal(refused[0].level, "error");
    assert.equal(await post("b", tokenB), 200, "the servers in force stay");
    assert.equal(await statusOf(`${url}/.well-known/oauth-protected-resource/mcp/d`), 200);

    assert.equal(await post("nope", tokenB), 404);
    const exposition = await t.deps.metrics.render();
    const servers = new Set(
      [...exposition.matchAll(/gateway_messages_total\{server="([^"]*)"/g)].map((m) => m[1]),
    );
    assert.ok(servers.has("b"), exposition);
    assert.ok([...servers].every((s) => ["a", "b", "d"].includes(s)), "only configured names");
  } finally {
    files.stop();
    for (const reader of readers) await reader.cancel().catch(() => {});
    a.end(), b.end(), c.end();
    await server.shutdown();
    t.close();
    await Promise.all([a.close(), b.close(), c.close()]);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("servers reload: a removed server's code and refresh token get invalid_target, with or without resource; the session stays and works again when the server is back", async () => {
  const dir = await Deno.makeTempDir();
  const file = `${dir}/servers.yaml`;
  const listed = serversYaml({ a: "http://127.0.0.1:1/mcp", b: "http://127.0.0.1:2/mcp" });
  await Deno.writeTextFile(file, listed);
  const t = await makeTestApp({ env: { MCP_SERVERS_FILE: file } });
  const files = followConfigFiles(t.deps, t.deps.logger, {});
  const A = `${TEST_BASE}/mcp/a`;
  try {
    const code = await issueCode(t, { resource: A });
    const first = await exchange(t, await issueCode(t, { resource: A }));
    assert.equal(first.status, 200, await first.clone().text());
    const { refresh_token } = await first.json();

    await Deno.writeTextFile(file, serversYaml({ b: "http://127.0.0.1:2/mcp" }));
    await files.check();
    await files.check();
    assert.deepEqual(t.deps.servers.names(), ["b"], "a removed");
    await assertError(await exchange(t, code), 400, "invalid_target", /no longer served/);
    await assertError(await refresh(t, refresh_token), 400, "invalid_target", /no longer served/);
    await assertError(await refresh(t, refresh_token, { resource: A }), 400, "invalid_target");

    await Deno.writeTextFile(file, listed);
    await files.check();
    await files.check();
    const again = await refresh(t, refresh_token);
    assert.equal(again.status, 200, await again.clone().text());
    assert.equal(
      decodeJwt((await again.json()).access_token).resource,
      A,
      "the same session, for the same server",
    );
    const exchanged = await exchange(t, code);
    assert.equal(exchanged.status, 200, "the code stayed");
    await exchanged.body?.cancel();
  } finally {
    files.stop();
    t.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("servers reload: a server the file adds at MCP_RESOURCE_URL's path is refused with one error line; the servers in force stay", async () => {
  const dir = await Deno.makeTempDir();
  const file = `${dir}/servers.yaml`;
  await Deno.writeTextFile(file, serversYaml({ a: "http://127.0.0.1:9/mcp" }));
  const lines: Record<string, unknown>[] = [];
  const t = await makeTestApp({
    // `/mcp`'s server is the resource at /mcp/docs (its trailing slash dropped).
    env: { MCP_SERVERS_FILE: file, MCP_RESOURCE_URL: `${TEST_BASE}/mcp/docs/` },
    logger: createLogger((line) => lines.push(JSON.parse(line))),
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  const url = `http://127.0.0.1:${server.addr.port}`;
  const files = followConfigFiles(t.deps, t.deps.logger, {});
  const metadataOf = async (path: string) => {
    const response = await fetch(`${url}/.well-known/oauth-protected-resource${path}`);
    return response.status === 200 ? (await response.json()).resource : response.status;
  };
  try {
    // The watch's first read done (a check waits for it): a write before it ends is its start.
    await files.check();
    await Deno.writeTextFile(
      file,
      serversYaml({ a: "http://127.0.0.1:9/mcp", docs: "http://127.0.0.1:9/docs" }),
    );
    await files.check();
    await files.check();
    const servers = lines.filter((l) => String(l.message).startsWith("MCP_SERVERS_FILE"));
    assert.equal(servers.length, 1, JSON.stringify(servers));
    assert.equal(servers[0].level, "error");
    assert.match(
      String(servers[0].message),
      /^MCP_SERVERS_FILE not reloaded, the servers in force stay: .*servers\.yaml: server docs: its path is the path of MCP_RESOURCE_URL/,
    );
    assert.equal(await metadataOf("/mcp/a"), `${TEST_BASE}/mcp/a`, "the servers in force stay");
    assert.equal(await metadataOf("/mcp/docs"), `${TEST_BASE}/mcp/docs`, "/mcp's, as before");
    assert.deepEqual(t.deps.servers.resources(TEST_BASE), [
      `${TEST_BASE}/mcp/docs`,
      `${TEST_BASE}/mcp/a`,
    ]);
  } finally {
    files.stop();
    await server.shutdown();
    t.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/** A sign-in for `resource` over real HTTP against the service and the simulated GitLab. */
async function signInFor(
  service: ServiceProcess,
  gitlab: SimulatedGitLab,
  resource: string,
): Promise<string> {
  const { flowState } = await authorizeOverHttp(service.url, { resource });
  gitlab.approve(gitlab.lastUserCode()!);
  const done = await pollOverHttp(service.url, flowState);
  assert.equal(done.body.status, "complete", JSON.stringify(done.body));
  const tokens = await exchangeOverHttp(service.url, done.body.code);
  assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
  return tokens.body.access_token;
}

/** How many lines of the service's log contain `text`. */
function linesWith(service: ServiceProcess, text: string): string[] {
  return service.logs.filter((line) => line.includes(text));
}

Deno.test(
  "servers reload: SIGHUP adds a server within 1 s; SDK v1 and v2 (2026-07-28) sign in and call its tool",
  { ignore: Deno.build.os === "windows" },
  async () => {
    const v2 = startMcpV2Upstream();
    const dir = await Deno.makeTempDir();
    const file = `${dir}/servers.yaml`;
    await Deno.writeTextFile(file, serversYaml({}));
    const { gitlab, service, close } = await spawnWithGitLab("app", { MCP_SERVERS_FILE: file });
    try {
      const tools = `${service.url}/mcp/tools`;
      assert.equal(await statusOf(tools), 404);
      await Deno.writeTextFile(file, serversYaml({ tools: v2.url }));
      service.signal("SIGHUP");
      await waitFor(() => linesWith(service, "MCP_SERVERS_FILE reloaded").length === 1, 1000);
      const logged = JSON.parse(linesWith(service, "MCP_SERVERS_FILE reloaded")[0]);
      assert.equal(logged.mcpServers, "tools");
      assert.equal(
        await statusOf(`${service.url}/.well-known/oauth-protected-resource/mcp/tools`),
        200,
      );

      const v1Token = await signInFor(service, gitlab, tools);
      const v1 = new ClientV1({ name: "reload-test", version: "1.0.0" });
      await v1.connect(
        new TransportV1(new URL(tools), {
          requestInit: { headers: { Authorization: `Bearer ${v1Token}` } },
        }),
      );
      const byV1 = await v1.callTool({ name: ROUTE_TOOL, arguments: { region: "eu" } });
      assert.match((byV1.content as { text: string }[])[0].text, /"region":"eu"/);
      await v1.close();

      const v2Token = await signInFor(service, gitlab, tools);
      const client = new ClientV2(
        { name: "reload-test", version: "1.0.0" },
        { versionNegotiation: { mode: { pin: "2026-07-28" } } },
      );
      await client.connect(
        new TransportV2(new URL(tools), {
          authProvider: { token: () => Promise.resolve(v2Token) },
        }),
      );
      const byV2 = await client.callTool({ name: ROUTE_TOOL, arguments: { region: "us" } });
      assert.match((byV2.content as { text: string }[])[0].text, /"mcpParamRegion":"us"/);
      await client.close();
    } finally {
      await close();
      await v2.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test(
  "servers reload: SIGHUP removes a server (404, its open GET stream ends within 5 s); a broken file keeps the set with one error line",
  { ignore: Deno.build.os === "windows" },
  async () => {
    const gone = streamingUpstream(), kept = streamingUpstream();
    const dir = await Deno.makeTempDir();
    const file = `${dir}/servers.yaml`;
    await Deno.writeTextFile(file, serversYaml({ gone: gone.url, kept: kept.url }));
    const { gitlab, service, close } = await spawnWithGitLab("app", { MCP_SERVERS_FILE: file });
    let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    try {
      const token = await signInFor(service, gitlab, `${service.url}/mcp/gone`);
      reader = await openGetStream(`${service.url}/mcp/gone`, token);

      await Deno.writeTextFile(file, serversYaml({ kept: kept.url }));
      service.signal("SIGHUP");
      assert.equal(await within(nextText(reader), 5000, "the removed server's stream"), undefined);
      assert.equal(await statusOf(`${service.url}/mcp/gone`), 404);
      assert.equal(
        await statusOf(`${service.url}/.well-known/oauth-protected-resource/mcp/gone`),
        404,
      );
      assert.equal(JSON.parse(linesWith(service, "MCP_SERVERS_FILE reloaded")[0]).removed, "gone");

      await Deno.writeTextFile(file, "servers:\n  - name: kept\n    url: [1\n");
      service.signal("SIGHUP");
      await waitFor(() => linesWith(service, "MCP_SERVERS_FILE not reloaded").length > 0, 1000);
      const refused = linesWith(service, "MCP_SERVERS_FILE not reloaded");
      assert.equal(refused.length, 1);
      assert.match(refused[0], /"level":"error"/);
      assert.match(refused[0], /servers\.yaml: line \d+, column \d+: not YAML/);
      assert.equal(
        await statusOf(`${service.url}/.well-known/oauth-protected-resource/mcp/kept`),
        200,
        "the servers in force stay, and the service runs on",
      );
    } finally {
      await reader?.cancel().catch(() => {});
      gone.end(), kept.end();
      await close();
      await Promise.all([gone.close(), kept.close()]);
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test(
  "servers reload: a request an https server holds ends (502) when SIGHUP removes that server, not when it answers",
  { ignore: Deno.build.os === "windows" },
  async () => {
    const mcp = await startDocumentServer();
    const arrived = Promise.withResolvers<void>();
    const held = Promise.withResolvers<void>();
    mcp.route("/mcp", async () => {
      arrived.resolve();
      await held.promise;
      return Response.json({ jsonrpc: "2.0", id: 1, result: {} });
    });
    const dir = await Deno.makeTempDir();
    const file = `${dir}/servers.yaml`;
    await Deno.writeTextFile(file, serversYaml({ gone: `${mcp.origin}/mcp` }));
    const { gitlab, service, close } = await spawnWithGitLab("app", {
      MCP_SERVERS_FILE: file,
      DENO_CERT: await mcp.caFile(),
    });
    try {
      const token = await signInFor(service, gitlab, `${service.url}/mcp/gone`);
      const answer = fetch(`${service.url}/mcp/gone`, mcpPostInit(token));
      await within(arrived.promise, 5000, "the request at the https MCP server");

      await Deno.writeTextFile(file, serversYaml({}));
      service.signal("SIGHUP");
      // The MCP server still holds it: only the gateway's giving it up can answer it.
      const response = await within(answer, 5000, "the held request's answer");
      const body = await response.json();
      assert.equal(response.status, 502, JSON.stringify(body));
      assert.equal(body.error, "bad_gateway");
      assert.equal(JSON.parse(linesWith(service, "MCP_SERVERS_FILE reloaded")[0]).removed, "gone");
    } finally {
      held.resolve();
      await close();
      await mcp.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test("servers reload: a request an http server holds ends (502) when a reload removes that server", async () => {
  const arrived = Promise.withResolvers<void>();
  const held = Promise.withResolvers<void>();
  const mcp = startScripted(async () => {
    arrived.resolve();
    await held.promise;
    return Response.json({ jsonrpc: "2.0", id: 1, result: {} });
  });
  const dir = await Deno.makeTempDir();
  const file = `${dir}/servers.yaml`;
  await Deno.writeTextFile(file, serversYaml({ gone: mcp.url }));
  const t = await makeTestApp({ env: { MCP_SERVERS_FILE: file } });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  const files = followConfigFiles(t.deps, t.deps.logger, {});
  try {
    const token = await tokenFor(t, `${TEST_BASE}/mcp/gone`);
    const answer = fetch(`http://127.0.0.1:${server.addr.port}/mcp/gone`, mcpPostInit(token));
    await within(arrived.promise, 5000, "the request at the MCP server");
    await Deno.writeTextFile(file, serversYaml({}));
    await files.check();
    await files.check();
    const response = await within(answer, 5000, "the held request's answer");
    assert.equal(response.status, 502, await response.clone().text());
    assert.equal((await response.json()).error, "bad_gateway");
  } finally {
    held.resolve();
    files.stop();
    await server.shutdown();
    t.close();
    await mcp.close();
    await Deno.remove(dir, { recursive: true });
  }
});
