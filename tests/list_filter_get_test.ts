/**
 * A list answer that comes back on a GET (2025-06-18 and later: a POST's stream broken off after
 * its priming event is resumed with a GET carrying `Last-Event-ID`, and the MCP server replays
 * the answer there) is cut by the policy as a POST's is. The SDK v1 and v2 clients call
 * `tools/list` through the real gateway; the scripted MCP server closes the POST's stream after
 * its priming event and replays the answer on the resumed GET: as an event stream (cut), and
 * with another content type, which both SDKs read as an event stream all the same (refused, 502:
 * the spec allows a GET nothing but an event stream or 405). A JSON answer to a GET is cut.
 */

import assert from "node:assert/strict";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
} from "@modelcontextprotocol/client";
import {
  auditLines,
  boundEventId,
  type GatewayServer,
  startGateway,
  startScripted,
  within,
} from "./_gateway_mcp.ts";

/** delete_project is refused to ada, the test user; read_file is not. */
const POLICY = { default: "allow", rules: [{ tools: ["delete_*"], deny: { users: ["ada"] } }] };

function toolsAnswer(id: unknown): string {
  const tools = ["delete_project", "read_file"].map((name) => ({
    name,
    inputSchema: { type: "object" },
  }));
  return JSON.stringify({ jsonrpc: "2.0", id, result: { tools } });
}

/**
 * A 2025-11-25 MCP server without sessions: `tools/list` gets a priming event and a closed
 * stream, and the answer comes on the GET that resumes it, with `replay.type`.
 */
function resumingServer(replay: { type: string }) {
  const pending = new Map<string, unknown>();
  return startScripted(async (request) => {
    if (request.method === "GET") {
      const last = request.headers.get("last-event-id");
      if (last === null || !pending.has(last)) return new Response(null, { status: 405 });
      const body = `id: ${last}-answer\ndata: ${toolsAnswer(pending.get(last))}\n\n`;
      return new Response(body, { headers: { "Content-Type": replay.type } });
    }
    const message = await request.json();
    if (message.id === undefined) return new Response(null, { status: 202 });
    if (message.method === "initialize") {
      return Response.json({
        jsonrpc: "2.0",
        id: message.id,
        result: {
          protocolVersion: message.params.protocolVersion,
          capabilities: { tools: {} },
          serverInfo: { name: "resuming", version: "1" },
        },
      });
    }
    const eventId = `list-${message.id}`;
    pending.set(eventId, message.id);
    // The priming event, then the connection closes before the answer (SEP-1699 polling).
    return new Response(`id: ${eventId}\nretry: 1\ndata:\n\n`, {
      headers: { "Content-Type": "text/event-stream" },
    });
  });
}

async function withGateway(
  replay: { type: string },
  run: (g: GatewayServer) => Promise<void>,
): Promise<void> {
  const upstream = resumingServer(replay);
  const policyPath = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(policyPath, JSON.stringify(POLICY));
  const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: policyPath } });
  try {
    await run(g);
  } finally {
    await g.close();
    await upstream.close();
    await Deno.remove(policyPath);
  }
}

/** What the test needs of either SDK's client. */
interface AnyClient {
  onerror?: (error: Error) => void;
  listTools(): Promise<{ tools: { name: string }[] }>;
  close(): Promise<void>;
}

/** Each SDK's client, connected to the gateway, its errors handed to `onerror`. */
const CLIENTS: Record<string, (g: GatewayServer) => Promise<AnyClient>> = {
  async v1(g) {
    const client = new ClientV1({ name: "resume-v1", version: "1" });
    await client.connect(
      new TransportV1(new URL(g.mcpUrl), {
        requestInit: { headers: { Authorization: `Bearer ${g.accessToken}` } },
      }),
    );
    return client;
  },
  async v2(g) {
    const client = new ClientV2({ name: "resume-v2", version: "1" });
    const token = g.accessToken;
    await client.connect(
      new TransportV2(new URL(g.mcpUrl), { authProvider: { token: () => Promise.resolve(token) } }),
    );
    return client;
  },
};

/**
 * What `tools/list` comes to: the names listed, or `"refused"` once the client failed to open
 * the resumed stream.
 */
async function listThroughResume(client: AnyClient): Promise<string[] | "refused"> {
  const refused = Promise.withResolvers<"refused">();
  client.onerror = (error) => {
    if (String(error).includes("Failed to open SSE stream")) refused.resolve("refused");
  };
  const listed = client.listTools().then(({ tools }) => tools.map(({ name }) => name));
  listed.catch(() => {});
  return await within(Promise.race([listed, refused.promise]), 10_000, "tools/list");
}

for (const [sdk, connect] of Object.entries(CLIENTS)) {
  Deno.test(`list filter on GET (SDK ${sdk}): a resumed stream's list answer is cut`, async () => {
    await withGateway({ type: "text/event-stream" }, async (g) => {
      const client = await connect(g);
      try {
        assert.deepEqual(await listThroughResume(client), ["read_file"]);
      } finally {
        await client.close();
      }
    });
  });

  Deno.test(`list filter on GET (SDK ${sdk}): a replay under another type is refused, not read uncut`, async () => {
    await withGateway({ type: "text/plain" }, async (g) => {
      const client = await connect(g);
      try {
        assert.equal(await listThroughResume(client), "refused");
        const gets = auditLines(g.lines).filter((line) => line.method === undefined);
        assert.ok(gets.some((line) => line.status === 502), JSON.stringify(gets));
      } finally {
        await client.close();
      }
    });
  });
}

Deno.test("list filter on GET: a JSON answer carrying a list is cut; one that is not JSON is refused", async () => {
  for (const type of ["application/json", "text/html"]) {
    const upstream = startScripted(() =>
      new Response(type === "text/html" ? "<p>tools</p>" : toolsAnswer(3), {
        headers: { "Content-Type": type },
      })
    );
    const policyPath = await Deno.makeTempFile({ suffix: ".json" });
    await Deno.writeTextFile(policyPath, JSON.stringify(POLICY));
    const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: policyPath } });
    try {
      const response = await fetch(g.mcpUrl, {
        headers: {
          Authorization: `Bearer ${g.accessToken}`,
          Accept: "text/event-stream",
          "Last-Event-ID": await boundEventId(g.accessToken, "list-3"),
        },
      });
      const text = await response.text();
      if (type === "text/html") {
        assert.equal(response.status, 502, text);
      } else {
        assert.equal(response.status, 200, text);
        const names = JSON.parse(text).result.tools.map(({ name }: { name: string }) => name);
        assert.deepEqual(names, ["read_file"]);
      }
    } finally {
      await g.close();
      await upstream.close();
      await Deno.remove(policyPath);
    }
  }
});
