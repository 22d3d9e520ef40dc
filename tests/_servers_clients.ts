/**
 * The MCP SDK clients the several-servers tests call servers with: SDK v1 (`whoami`) and SDK v2
 * pinned to 2026-07-28 (the v2 test server's note), each with a bearer token the test holds.
 */

import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
} from "@modelcontextprotocol/client";
import { NOTE_URI } from "./_mcp_v2_upstream.ts";

const CLIENT_INFO = { name: "servers-test", version: "1.0.0" };

/** `whoami`'s text, called with SDK v1 at `url` with `token`. */
export async function v1Whoami(url: string, token: string): Promise<string> {
  const client = new ClientV1(CLIENT_INFO);
  await client.connect(
    new TransportV1(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  try {
    const result = await client.callTool({ name: "whoami", arguments: {} });
    return String((result.content as { text: string }[])[0].text);
  } finally {
    await client.close();
  }
}

/** An SDK v2 client pinned to 2026-07-28, connected to `url` with `token`. */
export async function v2Client(url: string, token: string): Promise<ClientV2> {
  const client = new ClientV2(CLIENT_INFO, {
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  });
  await client.connect(
    new TransportV2(new URL(url), { authProvider: { token: () => Promise.resolve(token) } }),
  );
  return client;
}

/** The v2 test server's note, read with SDK v2 at `url` with `token`. */
export async function v2ReadsNote(url: string, token: string): Promise<string> {
  const client = await v2Client(url, token);
  try {
    const result = await client.readResource({ uri: NOTE_URI });
    return String((result.contents[0] as { text?: string }).text);
  } finally {
    await client.close();
  }
}
