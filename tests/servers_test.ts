/**
 * One service, several MCP servers (issue 35): MCP_SERVERS_FILE puts each behind `/mcp/<name>`
 * with its own audience beside MCP_UPSTREAM_URL's at `/mcp`. Over real HTTP: an SDK v1 server at
 * `/mcp` and an SDK v2 server (2026-07-28) at `/mcp/docs`; each is reached with a token for it,
 * and a token for one is refused at the other (401 `invalid_token`); each has its protected
 * resource metadata; `/authorize` and `/token` take only a served resource; audit lines and the
 * gateway's metrics name the server, and an unknown path never becomes a label value. And the file: YAML or JSON by extension, every mistake one line naming file, entry and
 * field.
 */

import assert from "node:assert/strict";
import { loadConfig } from "../src/app/config.ts";
import { checkConfiguration } from "../src/app/config_check.ts";
import { parseAdminArgs } from "../src/admin/args.ts";
import { AdminRefusal, runStoreCommand, type StoreCommand } from "../src/admin/commands.ts";
import { createLogger } from "../src/logger.ts";
import {
  exchange,
  issueCode,
  issueTokens,
  makeTestApp,
  refresh,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { startScripted } from "./_gateway.ts";
import { startMcpUpstream } from "./_mcp_upstream.ts";
import { NOTE_TEXT, startMcpV2Upstream } from "./_mcp_v2_upstream.ts";
import { mcpPostInit, spawnService } from "./_service.ts";
import { v1Whoami, v2ReadsNote } from "./_servers_clients.ts";

const DOCS = `${TEST_BASE}/mcp/docs`;

async function writeFile(name: string, text: string): Promise<string> {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/${name}`;
  await Deno.writeTextFile(path, text);
  return path;
}

function configWith(path: string) {
  return loadConfig({ GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET, MCP_SERVERS_FILE: path });
}

Deno.test("servers file: YAML and JSON by extension, fields taken, the service-wide values otherwise", async () => {
  const yaml = await writeFile(
    "servers.yaml",
    "servers:\n  - name: docs\n    url: http://127.0.0.1:3001/mcp\n" +
      "  - name: gl-tools\n    url: https://tools.example/mcp\n    token_header: none\n" +
      "    timeout_ms: 5000\n",
  );
  const json = await writeFile(
    "servers.json",
    JSON.stringify({ servers: [{ name: "docs", url: "http://127.0.0.1:3001/mcp" }] }),
  );
  try {
    const { servers } = configWith(yaml).mcpServersFile!;
    assert.deepEqual(servers.map((server) => server.name), ["docs", "gl-tools"]);
    assert.equal(servers[1].tokenHeader, "none");
    assert.equal(servers[1].timeoutMs, 5000);
    assert.equal(servers[0].tokenHeader, undefined);
    assert.equal(configWith(json).mcpServersFile!.servers[0].url.href, "http://127.0.0.1:3001/mcp");
  } finally {
    await Deno.remove(yaml);
    await Deno.remove(json);
  }
});

Deno.test("servers file: every mistake stops start-up with one line naming file, entry and field", async () => {
  const cases: [string, string, RegExp][] = [
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: [1\n",
      /s\.yaml: line \d+, column \d+: not YAML/,
    ],
    ["s.toml", "servers = []", /must end in \.yaml, \.yml or \.json/],
    ["s.yaml", "servers:\n  - name: Docs\n    url: http://x/mcp\n", /server 0 name: must match/],
    [
      "s.yaml",
      "servers:\n  - name: default\n    url: http://x/mcp\n",
      /server default name: "default" is the server at \/mcp/,
    ],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: ftp://x/mcp\n",
      /server docs url: must be an http/,
    ],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: http://x/mcp\n    colour: red\n",
      /server docs: unknown key "colour"/,
    ],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: http://x/mcp\n  - name: docs\n    url: http://y/mcp\n",
      /server "docs": the name is used twice/,
    ],
    ["s.yaml", "servers:\n  - name: docs\n    url: http://x/mcp\n    name: other\n", /not YAML/],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: http://x/mcp\n    token_header: cookie\n",
      /server docs token_header/,
    ],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: http://x/mcp\n    timeout_ms: 0\n",
      /server docs timeout_ms/,
    ],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: http://x/mcp\n    gitlab_scopes: [read_api]\n",
      /server docs gitlab_scopes: "read_api" is not in GITLAB_SCOPES \("api"\)/,
    ],
    [
      "s.yaml",
      'servers:\n  - name: docs\n    url: http://x/mcp\n    gitlab_scopes: ["read_api api"]\n',
      /server docs gitlab_scopes: "read_api api" is not one scope/,
    ],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: http://x/mcp\n    gitlab_scopes: []\n",
      /server docs gitlab_scopes: must be a non-empty list/,
    ],
    [
      "s.yaml",
      'servers:\n  - name: docs\n    url: http://x/mcp\n    allowed_gitlab_users: ["a b"]\n',
      /server docs allowed_gitlab_users: .*not a GitLab username/,
    ],
    [
      "s.yaml",
      "servers:\n  - name: docs\n    url: http://x/mcp\n    allowed_gitlab_groups: acme\n",
      /server docs allowed_gitlab_groups: must be a non-empty list/,
    ],
    [
      "s.yaml",
      'servers:\n  - name: docs\n    url: http://x/mcp\n    allowed_gitlab_groups: ["acme:boss"]\n',
      /server docs allowed_gitlab_groups: unknown role "boss"/,
    ],
    ["s.yaml", "hosts: []\n", /unknown key "hosts"/],
  ];
  for (const [name, text, expected] of cases) {
    const path = await writeFile(name, text);
    try {
      assert.throws(() => configWith(path), (error: unknown) => {
        const message = String(error);
        assert.match(message, /^ConfigError: MCP_SERVERS_FILE: /, message);
        assert.ok(message.includes(path), `names the file: ${message}`);
        assert.match(message, expected);
        assert.ok(!message.includes("\n"), "one line");
        return true;
      });
    } finally {
      await Deno.remove(path);
    }
  }
  assert.throws(() => configWith("/nonexistent/servers.yaml"), /cannot read the file/);
});

Deno.test("MCP_RESOURCE_URL on one of the service's own endpoints (at the root or under BASE_URL's path) stops start-up and config check with one line", () => {
  const env = (more: Record<string, string | undefined>) => ({
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    ...more,
  });
  for (
    const more of [
      { MCP_RESOURCE_URL: "https://auth.example/token" },
      { MCP_RESOURCE_URL: "https://auth.example/healthz/" },
      { MCP_RESOURCE_URL: "https://auth.example/.well-known/oauth-protected-resource" },
      { BASE_URL: "https://auth.example/gw", MCP_RESOURCE_URL: "https://auth.example/gw/register" },
    ]
  ) {
    assert.throws(() => loadConfig(env(more)), (error: unknown) => {
      const message = String(error);
      assert.match(message, /^ConfigError: MCP_RESOURCE_URL: its path is the service's own \//);
      assert.ok(!message.includes("\n"), "one line");
      return true;
    }, JSON.stringify(more));
    const check = checkConfiguration(env(more));
    assert.equal(check.problems.length, 1, check.problems.join("\n"));
  }
  // The root (an MCP server alone on its host) and paths beside the endpoints stay allowed.
  for (
    const url of ["https://mcp.example", "https://auth.example/tokens", "https://auth.example/mcp"]
  ) {
    assert.equal(loadConfig(env({ MCP_RESOURCE_URL: url })).mcpResourceUrl, url);
  }
});

Deno.test("servers file: a server at MCP_RESOURCE_URL's path (trailing slash, case aside) stops start-up and config check with one line", async () => {
  const path = await writeFile("servers.yaml", "servers:\n  - name: docs\n    url: http://x/mcp\n");
  const env = (more: Record<string, string | undefined>) => ({
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    MCP_SERVERS_FILE: path,
    ...more,
  });
  try {
    for (
      const more of [
        { MCP_RESOURCE_URL: "https://mcp.example/mcp/docs" },
        { MCP_RESOURCE_URL: "https://mcp.example/mcp/docs/" },
        { MCP_RESOURCE_URL: "HTTPS://MCP.example/MCP/Docs" },
        {
          BASE_URL: "https://auth.example/gw",
          MCP_RESOURCE_URL: "https://auth.example/gw/mcp/docs",
        },
      ]
    ) {
      assert.throws(() => loadConfig(env(more)), (error: unknown) => {
        const message = String(error);
        assert.match(
          message,
          /^ConfigError: MCP_SERVERS_FILE: .*servers\.yaml: server docs: its path is the path of MCP_RESOURCE_URL \(/,
          JSON.stringify(more),
        );
        assert.ok(!message.includes("\n"), "one line");
        return true;
      });
      const check = checkConfiguration(env(more));
      assert.equal(check.problems.length, 1, check.problems.join("\n"));
      assert.match(check.problems[0], /server docs: its path is the path of MCP_RESOURCE_URL/);
    }
    // Another path is no collision: under BASE_URL's path, or another name.
    for (
      const more of [
        { BASE_URL: "https://auth.example/gw", MCP_RESOURCE_URL: "https://auth.example/mcp/docs" },
        { MCP_RESOURCE_URL: "https://mcp.example/mcp/docs2" },
        { MCP_RESOURCE_URL: "https://mcp.example/mcp" },
      ]
    ) {
      assert.deepEqual(loadConfig(env(more)).mcpServersFile?.servers.map(({ name }) => name), [
        "docs",
      ]);
    }
  } finally {
    await Deno.remove(path);
  }
});

interface TwoServers {
  t: TestApp;
  url: string;
  lines: Record<string, unknown>[];
  close(): Promise<void>;
}

/** The service with an SDK v1 server at /mcp and an SDK v2 server at /mcp/docs, on loopback. */
async function twoServers(fn: (s: TwoServers) => Promise<void>): Promise<void> {
  const v1 = startMcpUpstream();
  const v2 = startMcpV2Upstream();
  const file = await writeFile("servers.yaml", `servers:\n  - name: docs\n    url: ${v2.url}\n`);
  const lines: Record<string, unknown>[] = [];
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: v1.url, MCP_SERVERS_FILE: file },
    logger: createLogger((line) => lines.push(JSON.parse(line))),
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  try {
    await fn({ t, url: `http://127.0.0.1:${server.addr.port}`, lines, close: async () => {} });
  } finally {
    await server.shutdown();
    t.close();
    await v1.close();
    await v2.close();
    await Deno.remove(file);
  }
}

async function tokensFor(t: TestApp, resource?: string) {
  if (resource === undefined) return await issueTokens(t);
  const code = await issueCode(t, { resource });
  const response = await exchange(t, code, { resource });
  assert.equal(response.status, 200, await response.clone().text());
  return await response.json();
}

async function status(url: string, token: string): Promise<{ status: number; challenge: string }> {
  const response = await fetch(url, mcpPostInit(token));
  await response.body?.cancel();
  return { status: response.status, challenge: response.headers.get("www-authenticate") ?? "" };
}

Deno.test("two servers: each reached with its own token by SDK v1 and v2; one's token refused at the other", () =>
  twoServers(async ({ t, url, lines }) => {
    const main = await tokensFor(t);
    const docs = await tokensFor(t, DOCS);
    assert.match(
      await v1Whoami(`${url}/mcp`, main.access_token),
      /"authorization":"Bearer gl-access/,
    );
    assert.equal(await v2ReadsNote(`${url}/mcp/docs`, docs.access_token), NOTE_TEXT);

    const docsAtMain = await status(`${url}/mcp`, docs.access_token);
    assert.equal(docsAtMain.status, 401);
    assert.match(docsAtMain.challenge, /error="invalid_token"/);
    const mainAtDocs = await status(`${url}/mcp/docs`, main.access_token);
    assert.equal(mainAtDocs.status, 401);
    assert.match(
      mainAtDocs.challenge,
      /resource_metadata="http:\/\/auth\.test\/\.well-known\/oauth-protected-resource\/mcp\/docs"/,
    );
    assert.equal((await status(`${url}/mcp/nope`, docs.access_token)).status, 404);

    const servers = new Set(
      lines.filter((line) => line.message === "mcp").map((line) => line.server),
    );
    assert.deepEqual([...servers].sort(), ["default", "docs"]);

    const exposition = await t.deps.metrics.render();
    const labelled = (family: string) =>
      new Set(
        exposition.split("\n")
          .filter((line) => line.startsWith(`gitlab_mcp_auth_${family}{`))
          .map((line) => line.match(/server="([^"]*)"/)?.[1]),
      );
    for (const family of ["gateway_messages_total", "gateway_upstream_responses_total"]) {
      assert.deepEqual([...labelled(family)].sort(), ["default", "docs"], family);
    }
    assert.match(exposition, /gateway_messages_total\{server="docs",method="resources\/read",/);
  }));

Deno.test("two servers: each has its resource metadata; /authorize and /token take only a served resource", () =>
  twoServers(async ({ t }) => {
    const prm = await t.app(
      new Request(`${TEST_BASE}/.well-known/oauth-protected-resource/mcp/docs`),
    );
    assert.equal(prm.status, 200);
    const document = await prm.json();
    assert.equal(document.resource, DOCS);
    assert.deepEqual(document.authorization_servers, [TEST_BASE]);
    const unknown = await t.app(
      new Request(`${TEST_BASE}/.well-known/oauth-protected-resource/mcp/other`),
    );
    assert.equal(unknown.status, 404);
    await unknown.body?.cancel();

    await assert.rejects(() => issueCode(t, { resource: `${TEST_BASE}/mcp/other` }));
    const code = await issueCode(t, { resource: DOCS });
    const moved = await exchange(t, code, { resource: `${TEST_BASE}/mcp` });
    assert.equal(moved.status, 400);
    assert.equal((await moved.json()).error, "invalid_target");

    const docs = await tokensFor(t, DOCS);
    const elsewhere = await refresh(t, docs.refresh_token, { resource: `${TEST_BASE}/mcp` });
    assert.equal(elsewhere.status, 400);
    assert.equal((await elsewhere.json()).error, "invalid_target", "a refresh never moves servers");
    const same = await refresh(t, docs.refresh_token, { resource: DOCS });
    assert.equal(same.status, 200);
    await same.body?.cancel();
  }));

Deno.test("a named server's own timeout_ms: its late answer is a 504 that names that limit", async () => {
  const { promise: released, resolve: release } = Promise.withResolvers<void>();
  const late = startScripted(async () => {
    await released;
    return new Response("late");
  });
  const file = await writeFile(
    "servers.yaml",
    `servers:\n  - name: docs\n    url: ${late.url}\n    timeout_ms: 150\n`,
  );
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: late.url, MCP_SERVERS_FILE: file, MCP_UPSTREAM_TIMEOUT_MS: "60000" },
  });
  try {
    const { access_token } = await tokensFor(t, DOCS);
    const response = await t.app(
      new Request(DOCS, mcpPostInit(access_token)),
    );
    assert.equal(response.status, 504);
    const body = await response.json();
    assert.equal(body.error, "gateway_timeout");
    assert.equal(body.error_description, "The MCP server did not answer within 150 ms");
  } finally {
    release();
    t.close();
    await late.close();
    await Deno.remove(file);
  }
});

Deno.test("two servers: the start-up line lists the servers the gateway serves", async () => {
  const file = await writeFile(
    "servers.yaml",
    "servers:\n  - name: docs\n    url: http://127.0.0.1:9/mcp\n  - name: tools\n    url: http://127.0.0.1:9/t\n",
  );
  const service = await spawnService({
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
    MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
    MCP_SERVERS_FILE: file,
  });
  try {
    assert.equal((service.listening as { mcpServers?: string }).mcpServers, "default,docs,tools");
  } finally {
    await service.stop();
    await Deno.remove(file);
  }
});

Deno.test("two servers: the operator lists the sessions of one server; an unknown name is refused", () =>
  twoServers(async ({ t }) => {
    await tokensFor(t);
    await tokensFor(t, DOCS);
    await tokensFor(t, DOCS);
    const printed: string[] = [];
    const deps = {
      store: t.store,
      logger: createLogger(() => {}),
      print: (line: string) => void printed.push(line),
      kvFileSize: () => Promise.resolve(undefined),
      servers: ["default", "docs"],
    };
    const list = async (server: string) => {
      printed.length = 0;
      const command = parseAdminArgs(["sessions", "list", "--server", server, "--json"]);
      assert.equal(await runStoreCommand(command as StoreCommand, deps), 0);
      return printed.length;
    };
    assert.equal(await list("docs"), 2);
    assert.equal(await list("default"), 1);
    await assert.rejects(
      () =>
        runStoreCommand(
          parseAdminArgs(["sessions", "list", "--server", "nope"]) as StoreCommand,
          deps,
        ),
      (error: unknown) => error instanceof AdminRefusal && error.exitCode === 2,
    );
  }));
