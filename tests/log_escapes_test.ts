/**
 * What a client chooses cannot act on the terminal that shows the log, over real HTTP: JSON
 * escapes C0 controls but writes C1 controls (U+009B is CSI: `\u009b2J` clears an xterm screen),
 * DEL, format characters (U+202E turns `moc.live` into `evil.com` on screen) and the line and
 * paragraph separators raw. A tool name in the audit line, a registered client's name, the
 * `Mcp-Protocol-Version` header: each reaches the log as `\u009b`-style escapes, and a JSON reader
 * still gets the value as it was sent.
 */

import assert from "node:assert/strict";
import { createLogger } from "../src/logger.ts";
import { startScripted } from "./_gateway_mcp.ts";
import { issueTokens, makeTestApp } from "./_helpers.ts";

/** A character no log line may carry raw: C0/C1 controls, DEL, format characters, separators. */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

/** What a hostile client writes: CSI clear-screen, RLO, a zero width space, separators, DEL. */
const HOSTILE = "evil\u009b2J\u009b1;1H\u202emoc.live\u200b\u2028\u2029\u0085\u007f\u{e0041}end";

Deno.test("log lines: control and format characters a client sent are written as escapes", async () => {
  const raw: string[] = [];
  const upstream = startScripted(async (request) => {
    const body = await request.json();
    return Response.json({ jsonrpc: "2.0", id: body.id, result: {} });
  });
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: upstream.url },
    logger: createLogger((line) => raw.push(line)),
  });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request, info) => t.app(request, info),
  );
  const base = `http://127.0.0.1:${server.addr.port}`;
  try {
    const { access_token } = await issueTokens(t);
    const call = await fetch(`${base}/mcp`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${access_token}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: HOSTILE, arguments: {} },
      }),
    });
    assert.equal(call.status, 200, await call.clone().text());
    await call.body?.cancel();

    // A header value carries bytes up to 0xFF: U+009B (CSI) is one.
    const refused = await fetch(`${base}/mcp`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Mcp-Protocol-Version": "\u009b2J" },
      body: "{}",
    });
    assert.equal(refused.status, 401);
    await refused.body?.cancel();

    const registered = await fetch(`${base}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:9999/cb"], client_name: HOSTILE }),
    });
    assert.equal(registered.status, 201, await registered.clone().text());
    await registered.body?.cancel();

    for (const line of raw) assert.doesNotMatch(line, UNPRINTABLE, line);
    const lines = raw.map((line) => JSON.parse(line));
    const audit = lines.filter((line) => line.message === "mcp");
    assert.equal(audit[0].name, HOSTILE, "a JSON reader gets the name as it was sent");
    assert.equal(audit[1].protocolVersion, "\u009b2J");
    const client = lines.find((line) => line.message === "client registered");
    assert.equal(client?.clientName, HOSTILE);
    const line = raw.find((line) => line.includes('"client registered"'));
    assert.ok(line?.includes("evil\\u009b2J\\u009b1;1H\\u202emoc.live\\u200b"), line);
  } finally {
    await server.shutdown();
    t.close();
    await upstream.close();
  }
});
