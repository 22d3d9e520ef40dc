/**
 * A server's own policy (issue 35 §1, `policy_file` in MCP_SERVERS_FILE): it decides the calls at
 * that server instead of MCP_POLICY_FILE, which keeps deciding at `/mcp` and at servers without
 * one; its groups' memberships are learnt at sign-in like MCP_POLICY_FILE's; a change to it is
 * followed as a change to the servers file is; a broken one stops start-up in one line naming
 * the servers file, the entry and the field. Over real HTTP with the MCP SDK v1 at `/mcp` and v2
 * (2026-07-28) at `/mcp/docs`.
 */

import assert from "node:assert/strict";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Client as ClientV2 } from "@modelcontextprotocol/client";
import { loadConfig } from "../src/app/config.ts";
import { followConfigFiles } from "../src/app/file_reloads.ts";
import { silentLogger } from "../src/logger.ts";
import {
  exchange,
  issueCode,
  issueTokens,
  makeTestApp,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import { NOTE_TEXT, NOTE_URI, ROUTE_TOOL, startMcpV2Upstream } from "./_mcp_v2_upstream.ts";
import { v2Client } from "./_servers_clients.ts";

const DOCS = `${TEST_BASE}/mcp/docs`;

/** The service-wide policy: no `whoami` and no notes for ada. */
const SERVICE_POLICY = {
  rules: [
    { tools: ["whoami"], deny: { users: ["ada"] } },
    { resources: ["note://*"], deny: { users: ["ada"] } },
  ],
};
/** docs' own policy: `route` only for members of acme. */
const DOCS_POLICY = { rules: [{ tools: [ROUTE_TOOL], allow: { groups: ["acme"] } }] };

interface Setup {
  t: TestApp;
  url: string;
  dir: string;
}

async function withServers(
  docsPolicy: unknown,
  fn: (s: Setup) => Promise<void>,
  groupLevels: Record<string, number> = {},
): Promise<void> {
  const v1 = startMcpUpstream();
  const v2 = startMcpV2Upstream();
  const dir = await Deno.makeTempDir({ prefix: "servers-policy-" });
  await Deno.writeTextFile(`${dir}/policy.json`, JSON.stringify(SERVICE_POLICY));
  await Deno.writeTextFile(`${dir}/docs-policy.json`, JSON.stringify(docsPolicy));
  await Deno.writeTextFile(
    `${dir}/servers.yaml`,
    `servers:\n  - name: docs\n    url: ${v2.url}\n    policy_file: ./docs-policy.json\n`,
  );
  const t = await makeTestApp({
    env: {
      MCP_UPSTREAM_URL: v1.url,
      MCP_SERVERS_FILE: `${dir}/servers.yaml`,
      MCP_POLICY_FILE: `${dir}/policy.json`,
      GITLAB_SCOPES: "read_user read_api",
    },
  });
  t.upstream.groupLevels = groupLevels;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  try {
    await fn({ t, url: `http://127.0.0.1:${server.addr.port}`, dir });
  } finally {
    await server.shutdown();
    t.close();
    await v1.close();
    await v2.close();
    await Deno.remove(dir, { recursive: true });
  }
}

async function docsToken(t: TestApp): Promise<string> {
  const code = await issueCode(t, { resource: DOCS });
  const response = await exchange(t, code, { resource: DOCS });
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()).access_token;
}

async function v1WhoamiRefused(url: string, token: string): Promise<boolean> {
  const client = new ClientV1({ name: "servers-policy-test", version: "1.0.0" });
  await client.connect(
    new TransportV1(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  try {
    await client.callTool({ name: "whoami", arguments: {} });
    return false;
  } catch {
    return true;
  } finally {
    await client.close();
  }
}

async function routeAnswered(client: ClientV2): Promise<boolean> {
  try {
    await client.callTool({ name: ROUTE_TOOL, arguments: { region: "eu" } });
    return true;
  } catch {
    return false;
  }
}

Deno.test("a server's own policy decides there instead of MCP_POLICY_FILE, which keeps deciding at /mcp", () =>
  withServers(DOCS_POLICY, async ({ t, url }) => {
    const main = await issueTokens(t);
    assert.ok(await v1WhoamiRefused(`${url}/mcp`, main.access_token), "MCP_POLICY_FILE at /mcp");

    const docs = await v2Client(`${url}/mcp/docs`, await docsToken(t));
    try {
      // MCP_POLICY_FILE's note rule does not reach docs: docs' own policy names no resources.
      const note = await docs.readResource({ uri: NOTE_URI });
      assert.equal((note.contents[0] as { text?: string }).text, NOTE_TEXT);
      // docs' own rule: route for members of acme, and ada is none.
      assert.equal(await routeAnswered(docs), false);
      const { tools } = await docs.listTools();
      assert.ok(!tools.some((tool) => tool.name === ROUTE_TOOL), "the refused tool is not listed");
    } finally {
      await docs.close();
    }
  }));

Deno.test("a server's own policy: its groups are learnt at sign-in, so a member is admitted", () =>
  withServers(DOCS_POLICY, async ({ t, url }) => {
    const docs = await v2Client(`${url}/mcp/docs`, await docsToken(t));
    try {
      assert.equal(await routeAnswered(docs), true);
    } finally {
      await docs.close();
    }
  }, { acme: 30 }));

Deno.test("a server's own policy file is followed: a change applies without a signal", () =>
  withServers(DOCS_POLICY, async ({ t, url, dir }) => {
    const followed = followConfigFiles(t.deps, silentLogger, {});
    try {
      const token = await docsToken(t);
      let docs = await v2Client(`${url}/mcp/docs`, token);
      assert.equal(await routeAnswered(docs), false);
      await docs.close();
      await Deno.writeTextFile(
        `${dir}/docs-policy.json`,
        JSON.stringify({ rules: [{ tools: [ROUTE_TOOL], allow: { users: ["ada"] } }] }),
      );
      await followed.check();
      await followed.check();
      docs = await v2Client(`${url}/mcp/docs`, token);
      try {
        assert.equal(await routeAnswered(docs), true);
      } finally {
        await docs.close();
      }
    } finally {
      followed.stop();
    }
  }));

Deno.test("a server's policy file that cannot be used stops start-up in one line naming file, entry and field", async () => {
  const dir = await Deno.makeTempDir({ prefix: "servers-policy-" });
  try {
    const servers = `${dir}/servers.yaml`;
    const cases: [string | undefined, RegExp][] = [
      [undefined, /cannot read the file/],
      ["{ not json", /not JSON/],
      [JSON.stringify({ rules: [{ tools: ["x"], allow: { groups: ["acme:boss"] } }] }), /boss/],
    ];
    for (const [text, problem] of cases) {
      await Deno.remove(`${dir}/p.json`).catch(() => {});
      if (text !== undefined) await Deno.writeTextFile(`${dir}/p.json`, text);
      await Deno.writeTextFile(
        servers,
        "servers:\n  - name: docs\n    url: http://127.0.0.1:1/mcp\n    policy_file: p.json\n",
      );
      assert.throws(
        () =>
          loadConfig({ GITLAB_CLIENT_ID: "a", JWT_SECRET: TEST_SECRET, MCP_SERVERS_FILE: servers }),
        (error: Error) => {
          assert.match(error.message, /^MCP_SERVERS_FILE: /);
          assert.ok(error.message.includes(servers), error.message);
          assert.match(error.message, /server docs policy_file: /);
          assert.match(error.message, problem);
          assert.ok(!error.message.includes("\n"), "one line");
          return true;
        },
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
