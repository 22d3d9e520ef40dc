/**
 * What the README tells a first-time operator to type works as typed: "Run it with GitLab"
 * step 2 creates the KV file's folder before the service needs it, and its settings make a
 * complete configuration; the client allow-list example (docs/security.md) admits the real
 * redirect URIs of the clients it names, and registers each of them with the real app.
 */

import assert from "node:assert/strict";
import { dirname } from "node:path";
import { isAllowedRedirect } from "../src/clients/redirect_allow_list.ts";
import { loadConfig, oauthSettings } from "../src/app/config.ts";
import { parseRedirectPatterns } from "../src/clients/config.ts";
import { TEST_BASE, TEST_SECRET, withEnv } from "./_helpers.ts";
import { docsPage, readmeSection, shellBlocks } from "./_readme.ts";

/** The commands of a shell block, comments stripped. */
function commands(lines: string[]): string[] {
  return lines.map((line) => line.replace(/\s+#.*$/, "").trim());
}

/** `export NAME=value` lines, in order; a `$(…)` value becomes `substitute`. */
function exported(lines: string[], substitute: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const command of commands(lines)) {
    const match = command.match(/^export ([A-Z][A-Z0-9_]*)=(.*)$/);
    if (!match) continue;
    const value = match[2].replace(/^"(.*)"$/, "$1");
    env[match[1]] = value.startsWith("$(") ? substitute : value;
  }
  return env;
}

/** Step 2's block: the one that starts the service. */
async function startBlock(): Promise<string[]> {
  const blocks = shellBlocks(await readmeSection("Run it with GitLab"));
  const block = blocks.find((lines) => lines.some((line) => line.includes("task start")));
  assert.ok(block, "Run it with GitLab has a block that starts the service");
  return block;
}

Deno.test("README Run it with GitLab: the KV file's folder is created before the service starts", async () => {
  const block = await startBlock();
  const kvPath = exported(block, TEST_SECRET).KV_PATH;
  assert.ok(kvPath?.startsWith("/"), "step 2 sets an absolute KV_PATH");
  const folder = dirname(kvPath);
  const run = commands(block);
  const creates = run.findIndex((command) =>
    /^(sudo )?(install -d|mkdir -p)\b/.test(command) && command.split(/\s+/).includes(folder)
  );
  assert.ok(creates >= 0, `step 2 creates ${folder}`);
  assert.ok(creates < run.findIndex((command) => command.includes("task start")));
});

Deno.test("README Run it with GitLab: step 2's settings make a production service with its MCP server at /mcp", async () => {
  const env = exported(await startBlock(), TEST_SECRET);
  const config = loadConfig({ ...env, GITLAB_CLIENT_ID: "app-id" });
  assert.ok(oauthSettings(config), "OAuth is configured");
  assert.equal(config.securityProfile, "strict");
  assert.ok(config.mcpUpstreamUrl, "MCP_UPSTREAM_URL is set: the gateway serves /mcp");
  const step3 = (await readmeSection("Run it with GitLab")).split(/^3\. /m)[1] ?? "";
  assert.ok(step3.includes(`${config.baseUrl}/mcp`), "step 3 connects clients to {BASE_URL}/mcp");
});

/**
 * Each client's real redirect URIs: those it registers in one `/register` (all must be
 * allowed), those it then sends to `/authorize`, and those its metadata document lists.
 */
const CLIENTS: { name: string; registers: string[]; uses: string[]; source: string }[] = [
  {
    name: "Claude (claude.ai, Desktop)",
    registers: ["https://claude.ai/api/mcp/auth_callback"],
    uses: ["https://claude.ai/api/mcp/auth_callback", "https://claude.com/api/mcp/auth_callback"],
    source: "docs/mcp-clients.md Connecting MCP clients; RevenueCat/ai-toolkit#58",
  },
  {
    name: "Claude Code",
    registers: ["http://localhost:54212/callback"],
    // Its metadata document (https://claude.ai/oauth/claude-code-client-metadata) lists these.
    uses: [
      "http://localhost:54212/callback",
      "http://localhost/callback",
      "http://127.0.0.1/callback",
    ],
    source: "anthropics/claude-code#66511, #42301",
  },
  {
    name: "VS Code",
    registers: [
      "https://insiders.vscode.dev/redirect",
      "https://vscode.dev/redirect",
      "http://127.0.0.1/",
      "http://127.0.0.1:33418/",
    ],
    uses: ["http://127.0.0.1:33418/", "http://127.0.0.1:59656/", "https://vscode.dev/redirect"],
    source: "microsoft/vscode src/vs/base/common/oauth.ts fetchDynamicRegistration; #278512",
  },
  {
    name: "VS Code (versions that register localhost too)",
    registers: [
      "https://insiders.vscode.dev/redirect",
      "https://vscode.dev/redirect",
      "http://localhost/",
      "http://127.0.0.1/",
      "http://localhost:33418/",
      "http://127.0.0.1:33418/",
    ],
    uses: ["http://localhost:33418/"],
    source: "microsoft/vscode oauth tests",
  },
  {
    name: "MCP Inspector",
    registers: [
      "http://localhost:6274/oauth/callback",
      "http://localhost:6274/oauth/callback/debug",
    ],
    uses: ["http://localhost:6274/oauth/callback", "http://localhost:6274/oauth/callback/debug"],
    source: "modelcontextprotocol/inspector client/src/lib/auth.ts",
  },
  {
    name: "mcp-remote",
    registers: ["http://localhost:3334/oauth/callback"],
    uses: ["http://localhost:3334/oauth/callback", "http://localhost:41785/oauth/callback"],
    source: "geelen/mcp-remote src/lib/node-oauth-client-provider.ts",
  },
  {
    name: "MCP SDK client (the demo's, the tests')",
    registers: ["http://127.0.0.1:9/callback"],
    uses: ["http://127.0.0.1:9/callback"],
    source: "tests/demo_test.ts",
  },
  {
    name: "Cursor",
    registers: [
      "cursor://anysphere.cursor-mcp/oauth/callback",
      "https://www.cursor.com/agents/mcp/oauth/callback",
      "http://localhost:8787/callback",
    ],
    uses: ["cursor://anysphere.cursor-mcp/oauth/callback"],
    source: "makeplane/plane-mcp-server#159, erp-mafia/accounted#2225",
  },
];

/** What the example must still refuse: look-alikes of the URIs it admits. */
const LOOK_ALIKES = [
  "https://evil.example/oauth/callback",
  "https://claude.ai.evil.example/api/mcp/auth_callback",
  "https://claude.ai/api/mcp/auth_callback/../../evil",
  "http://127.0.0.1.evil.example/",
  "http://localhost.evil.example:8080/callback",
  "http://localhost:80@evil.example/callback",
  "cursor://evil/oauth/callback",
  "http://evil.example:6274/oauth/callback",
];

/**
 * The ALLOWED_REDIRECT_URIS of the allow-list example (docs/security.md, "Client allow-list"),
 * parsed as the service does.
 */
async function readmeAllowList(): Promise<{ raw: string; patterns: string[] }> {
  const text = await Deno.readTextFile(docsPage("security.md"));
  const section = text.split("\n### Client allow-list\n")[1]?.split("\n### ")[0] ?? "";
  const raw = section.match(/^ALLOWED_REDIRECT_URIS=(\S+)$/m)?.[1];
  assert.ok(raw, "the Client allow-list section has an ALLOWED_REDIRECT_URIS example");
  return { raw, patterns: parseRedirectPatterns("ALLOWED_REDIRECT_URIS", raw) };
}

Deno.test("docs client allow-list: the example admits each named client's real redirect URIs, not look-alikes", async (t) => {
  const { patterns } = await readmeAllowList();
  for (const client of CLIENTS) {
    await t.step(client.name, () => {
      for (const uri of [...client.registers, ...client.uses]) {
        assert.ok(isAllowedRedirect(uri, patterns), `${uri} (${client.source})`);
      }
    });
  }
  for (const uri of LOOK_ALIKES) assert.ok(!isAllowedRedirect(uri, patterns), `refuses ${uri}`);
});

Deno.test("docs client allow-list: with the example set, each client's real registration succeeds", async () => {
  const { raw } = await readmeAllowList();
  await withEnv({ REDIRECT_URI_POLICY: "registered", ALLOWED_REDIRECT_URIS: raw }, async (t) => {
    for (const client of CLIENTS) {
      const response = await t.app(
        new Request(`${TEST_BASE}/register`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ client_name: client.name, redirect_uris: client.registers }),
        }),
      );
      assert.equal(response.status, 201, `${client.name}: ${await response.text()}`);
    }
  });
});
