/**
 * A machine client end to end with real components: two service processes on one KV file in
 * gateway mode in front of an MCP SDK server; the client gets its token with oauth4webapi's
 * `PrivateKeyJwt` client-credentials request and calls a tool through either instance, with the
 * MCP SDK v1 client through one and the SDK v2 client through the other; the MCP server receives no GitLab token (the rule gives none). Then the
 * operator deletes the client with the CLI, and both instances refuse its token from the next
 * call (the issue allows 1 s on the instance and 5 s on others; they refuse at once).
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
} from "@modelcontextprotocol/client";
import { TEST_SECRET } from "./_helpers.ts";
import { baseUrlEnv, clientKeyPair, writeAccessFile } from "./_machine_clients.ts";
import { postInitialize } from "./_mcp_client.ts";
import { startMcpUpstream, type WhoAmI } from "./_mcp_upstream.ts";
import { runAdminCli, type ServiceProcess, spawnService } from "./_service.ts";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";

const INSECURE = { [oauth.allowInsecureRequests]: true } as const;

/** A client-credentials token from `serviceUrl` with oauth4webapi's PrivateKeyJwt. */
async function clientToken(serviceUrl: string, clientId: string, key: CryptoKey, kid: string) {
  const issuer = new URL(serviceUrl);
  const as = await oauth.processDiscoveryResponse(
    issuer,
    await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...INSECURE }),
  );
  assert.ok(as.grant_types_supported?.includes("client_credentials"));
  const client: oauth.Client = { client_id: clientId };
  const response = await oauth.clientCredentialsGrantRequest(
    as,
    client,
    oauth.PrivateKeyJwt({ key, kid }),
    new URLSearchParams({ resource: `${serviceUrl}/mcp` }),
    INSECURE,
  );
  return (await oauth.processClientCredentialsResponse(as, client, response)).access_token;
}

/** What a connected MCP client, v1's or v2's, needs for `whoami`. */
interface McpCaller {
  callTool(params: { name: string; arguments: Record<string, unknown> }): Promise<unknown>;
  close(): Promise<void>;
}

/** `whoami` called with `client`, connected; then closed. */
async function whoamiWith(client: McpCaller): Promise<WhoAmI> {
  try {
    const result = await client.callTool({ name: "whoami", arguments: {} }) as {
      content: { type: string; text: string }[];
    };
    return JSON.parse(result.content[0].text);
  } finally {
    await client.close();
  }
}

/** `whoami` called through the gateway at `serviceUrl` by the MCP SDK v1 client with `token`. */
async function whoami(serviceUrl: string, token: string): Promise<WhoAmI> {
  const transport = new StreamableHTTPClientTransport(new URL(`${serviceUrl}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "nightly-report", version: "1.0.0" });
  await client.connect(transport);
  return await whoamiWith(client);
}

/** The same call by the MCP SDK v2 client, its token from an `authProvider`. */
async function whoamiV2(serviceUrl: string, token: string): Promise<WhoAmI> {
  const client = new ClientV2({ name: "nightly-report", version: "2.0.0" });
  await client.connect(
    new TransportV2(new URL(`${serviceUrl}/mcp`), {
      authProvider: { token: () => Promise.resolve(token) },
    }),
  );
  return await whoamiWith(client);
}

Deno.test({
  name:
    "client credentials: a PrivateKeyJwt token calls a tool through the gateway on two instances; a deleted client is refused by both",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir();
    const gitlab = startSimulatedGitLab();
    const mcp = startMcpUpstream();
    const env = {
      GITLAB_URL: gitlab.url.href,
      GITLAB_CLIENT_ID: "machine-app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: `${dir}/kv.sqlite3`,
      MCP_UPSTREAM_URL: mcp.url,
      MACHINE_ACCESS_FILE: await writeAccessFile([
        { client_id: "nightly-report", servers: ["default"] },
      ]),
    };
    const services: ServiceProcess[] = [];
    try {
      // private_key_jwt needs BASE_URL: each instance is its own issuer here (behind one
      // BASE_URL they would share it).
      services.push(await spawnService({ ...env, ...baseUrlEnv() }));
      services.push(await spawnService({ ...env, ...baseUrlEnv() }));
      const key = await clientKeyPair("ES256", "nightly-1");
      const keyFile = `${dir}/nightly.jwks.json`;
      await Deno.writeTextFile(keyFile, JSON.stringify({ keys: [key.jwk] }));
      const added = await runAdminCli([
        "clients",
        "add",
        "--name",
        "nightly report",
        "--grant",
        "client_credentials",
        "--id",
        "nightly-report",
        "--jwks-file",
        keyFile,
      ], { ...env, BASE_URL: services[0].url });
      assert.equal(added.code, 0, added.stderr);

      const tokens: string[] = [];
      for (const [i, service] of services.entries()) {
        const token = await clientToken(service.url, "nightly-report", key.privateKey, key.kid);
        tokens.push(token);
        const seen = await (i === 0 ? whoami : whoamiV2)(service.url, token);
        assert.equal(seen.authorization, null, "the rule gives the MCP server no GitLab token");
        assert.equal(seen.privateToken, null);
        assert.ok(!mcp.requests.some((r) => r.headers.get("authorization")?.includes(token)));
      }
      const lines = services[0].logs.map((line) => JSON.parse(line));
      const issued = lines.find((line) => line.grant === "client_credentials");
      assert.equal(issued?.caller, "client");
      assert.equal(issued?.clientId, "nightly-report");
      const called = lines.find((line) => line.message === "mcp" && line.method === "tools/call");
      assert.equal(called?.caller, "client", JSON.stringify(called));

      const deleted = await runAdminCli(["clients", "delete", "nightly-report"], env);
      assert.equal(deleted.code, 0, deleted.stderr);
      for (const [i, service] of services.entries()) {
        const refused = await postInitialize(service.url, tokens[i], "nightly-report");
        await refused.body?.cancel();
        assert.equal(refused.status, 401, `${service.url} refuses the deleted client's token`);
      }
    } finally {
      await Promise.all(services.map((service) => service.stop()));
      await mcp.close();
      await gitlab.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
