/**
 * A machine client's open event stream through the gateway, over real HTTP, with the operator's
 * CLI run as a process on the same KV file: the stream lives while its client does (a machine
 * token has no stored session, so the check of open streams must not read its `sid` as an ended
 * one), and `admin clients delete` ends it at the next check, as it ends the client's calls.
 */

import assert from "node:assert/strict";
import { modernBody, startGateway, startScripted, within } from "./_gateway_mcp.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { addClient, basic, writeAccessFile } from "./_machine_clients.ts";
import { runAdminCli } from "./_service.ts";

const encoder = new TextEncoder();

/** An MCP server answering every request with an event stream it holds open. */
function streamingUpstream() {
  const { promise: cancelled, resolve: onCancel } = Promise.withResolvers<void>();
  const upstream = startScripted(() =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(encoder.encode(": open\n\n"));
        },
        cancel() {
          onCancel();
        },
      }),
      { headers: { "Content-Type": "text/event-stream" } },
    )
  );
  return { upstream, cancelled };
}

async function untilEnd(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
  while ((await reader.read().catch(() => ({ done: true }))).done !== true) {
    // keep reading
  }
}

Deno.test({
  name:
    "admin clients delete: a machine client's open stream lives while the client does, and ends at the next check after the delete",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir();
    const kvPath = `${dir}/kv.sqlite3`;
    const mcp = streamingUpstream();
    const access = await writeAccessFile([{ client_id: "nightly", servers: ["default"] }]);
    const g = await startGateway(mcp.upstream.url, {
      env: { MACHINE_ACCESS_FILE: access },
      kvPath,
      signIn: false,
    });
    let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    try {
      const { client_id, client_secret } = await addClient(g.t.store, {
        id: "nightly",
        secret: true,
      });
      const base = g.mcpUrl.replace(/\/mcp$/, "");
      const issued = await fetch(`${base}/token`, {
        method: "POST",
        headers: {
          "Content-Type": "application/x-www-form-urlencoded",
          ...basic(client_id, client_secret ?? ""),
        },
        body: new URLSearchParams({ grant_type: "client_credentials" }),
      });
      assert.equal(issued.status, 200);
      const { access_token } = await issued.json();

      const listen = await fetch(g.mcpUrl, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${access_token}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
          "MCP-Protocol-Version": "2026-07-28",
          "Mcp-Method": "subscriptions/listen",
        },
        body: modernBody(1, "subscriptions/listen", { notifications: {} }),
      });
      assert.equal(listen.status, 200);
      reader = listen.body!.getReader();
      const first = await within(reader.read(), 5_000, "the first comment");
      assert.equal(new TextDecoder().decode(first.value), ": open\n\n");

      // What the timer runs every 2 s: the client is stored, so its stream stays.
      await g.t.deps.openStreams.check();
      assert.equal(g.t.deps.openStreams.size, 1, "a live machine client's stream is kept");

      const deleted = await runAdminCli(["clients", "delete", "nightly"], {
        KV_PATH: kvPath,
        JWT_SECRET: TEST_SECRET,
      });
      assert.equal(deleted.code, 0, deleted.stderr);
      await g.t.deps.openStreams.check();
      await within(untilEnd(reader), 1_000, "the stream's end after the delete");
      await within(mcp.cancelled, 5_000, "the MCP server's cancellation");
      assert.equal(g.t.deps.openStreams.size, 0);
    } finally {
      await reader?.cancel().catch(() => {});
      await g.close();
      await mcp.upstream.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
