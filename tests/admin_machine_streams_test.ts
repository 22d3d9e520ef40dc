/**
 * A machine caller's open event stream through the gateway, over real HTTP, with the operator's
 * CLI run as a process on the same KV file: the stream lives while its client does (a machine
 * token has no stored session, so the check of open streams must not read its `sid` as an ended
 * one), and `admin clients delete` ends it at the next check, as it ends the client's calls; a
 * CI job's or a client's stream ends at the next check once MACHINE_ACCESS_FILE's rules in force
 * no longer admit it, as its next call is refused.
 */

import assert from "node:assert/strict";
import { modernBody, startGateway, startScripted, within } from "./_gateway_mcp.ts";
import { TEST_BASE, TEST_SECRET } from "./_helpers.ts";
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

/** A 2026-07-28 `subscriptions/listen` through the gateway with `token`; its reader once open. */
async function listen(mcpUrl: string, token: string) {
  const response = await fetch(mcpUrl, {
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
  assert.equal(response.status, 200);
  const reader = response.body!.getReader();
  const first = await within(reader.read(), 5_000, "the first comment");
  assert.equal(new TextDecoder().decode(first.value), ": open\n\n");
  return reader;
}

/** A token endpoint answer's access token, from a form posted to `base`/token. */
async function tokenFrom(base: string, form: Record<string, string>, headers = {}) {
  const issued = await fetch(`${base}/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(form),
  });
  assert.equal(issued.status, 200, await issued.clone().text());
  return (await issued.json()).access_token as string;
}

Deno.test({
  name:
    "machine streams: a CI job's and a client's open streams end at the next check once the rules in force no longer admit them",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const mcp = streamingUpstream();
    const access = await writeAccessFile(
      [{ client_id: "nightly", servers: ["default"] }],
      [{ project: "acme/app", ref_protected: true, servers: ["default"] }],
    );
    const g = await startGateway(mcp.upstream.url, {
      env: { MACHINE_ACCESS_FILE: access },
      signIn: false,
    });
    const readers: ReadableStreamDefaultReader<Uint8Array>[] = [];
    try {
      const base = g.mcpUrl.replace(/\/mcp$/, "");
      const { client_id, client_secret } = await addClient(g.t.store, {
        id: "nightly",
        secret: true,
      });
      const clientToken = await tokenFrom(base, { grant_type: "client_credentials" }, {
        ...basic(client_id, client_secret ?? ""),
      });
      const idToken = await g.t.upstream.idTokens.sign(TEST_BASE, g.t.clock.now());
      const ciToken = await tokenFrom(base, {
        grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer",
        assertion: idToken,
      });
      readers.push(await listen(g.mcpUrl, clientToken), await listen(g.mcpUrl, ciToken));
      await g.t.deps.openStreams.check();
      assert.equal(g.t.deps.openStreams.size, 2, "streams the rules admit are kept");

      // The CI rule narrowed to protected tags: the job (a protected branch) is admitted no more.
      await Deno.writeTextFile(
        access,
        JSON.stringify({
          clients: [{ client_id: "nightly", servers: ["default"] }],
          ci: [{ project: "acme/app", ref_type: "tag", servers: ["default"] }],
        }),
      );
      assert.equal(g.t.deps.machineAccess.reload().kind, "reloaded");
      const call = await fetch(g.mcpUrl, {
        method: "POST",
        headers: { Authorization: `Bearer ${ciToken}`, "Content-Type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" }),
      });
      await call.body?.cancel();
      assert.equal(call.status, 401, "the job's next call is refused");
      await g.t.deps.openStreams.check();
      await within(untilEnd(readers[1]), 1_000, "the CI job's stream's end");
      assert.equal(g.t.deps.openStreams.size, 1, "the client's rule still admits it");

      // The client's rule removed: the client is still stored, but no rule admits it.
      await Deno.writeTextFile(access, JSON.stringify({ clients: [], ci: [] }));
      assert.equal(g.t.deps.machineAccess.reload().kind, "reloaded");
      await g.t.deps.openStreams.check();
      await within(untilEnd(readers[0]), 1_000, "the client's stream's end");
      assert.equal(g.t.deps.openStreams.size, 0);
    } finally {
      for (const reader of readers) await reader.cancel().catch(() => {});
      await g.close();
      await mcp.upstream.close();
    }
  },
});
