/**
 * Resource rules cannot be bypassed by how a URI is spelled (issue 33 §1.1). Both official MCP
 * SDKs look a resource up by its WHATWG normal form (`new URL(uri).toString()`), so with a policy
 * in force the gateway refuses a `resources/read` or `resources/subscribe` whose `uri` is not
 * already in that form (-32602, never forwarded, audited as a denial), matches rules against
 * normal forms (patterns are normalised when the file is read) and drops list items that are not
 * in normal form. Each spelling the review found is sent through the gateway to an SDK v1
 * (2025-11-25) and an SDK v2 (2026-07-28) server that would have served it. A pattern whose
 * normal form would miss what it names as written stops start-up, and a 2026-07-28 listen
 * stream's resource subscriptions are decided as reads.
 */

import assert from "node:assert/strict";
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer as McpServerV1 } from "@modelcontextprotocol/sdk/server/mcp.js";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as ClientV2,
  StreamableHTTPClientTransport as TransportV2,
} from "@modelcontextprotocol/client";
import { createMcpHandler, McpServer as McpServerV2 } from "@modelcontextprotocol/server";
import { serveMcp } from "../dev/mcp_http.ts";
import { isNormalUri, normalUriPattern } from "../src/access/resource_uri.ts";
import { parseCallPolicy, PolicyError } from "../src/access/call_policy.ts";
import { auditLines, type GatewayServer, postToGateway, startGateway } from "./_gateway_mcp.ts";
import { loadConfig } from "../src/app/config.ts";
import { NOTE_URI, startMcpV2Upstream } from "./_mcp_v2_upstream.ts";
import { TEST_SECRET } from "./_helpers.ts";

/** The resources both servers serve, by their normal form. */
const RESOURCES = [
  "gitlab://secrets/a",
  "gitlab://projects/acme/readme",
  "gitlab://projects/other/secret",
  "file:///srv/secret.txt",
  "file:///srv/public/readme.txt",
];

/** An allow rule the test user ("ada", in no group) does not meet; anything else allowed. */
const SECRETS_FOR_SECURITY = {
  default: "allow",
  rules: [{ resources: ["gitlab://secrets/*"], allow: { groups: ["acme/security"] } }],
};
/** Only what the rules allow; the patterns as an operator might write them. */
const DEFAULT_DENY = {
  default: "deny",
  rules: [{
    resources: ["GITLAB://projects/acme/*", "file:///srv/public/../public/*"],
    allow: { users: ["ada"] },
  }],
};
/** One file refused to everyone. */
const DENY_ONE_FILE = {
  default: "allow",
  rules: [{ resources: ["file:///srv/secret.txt"], deny: { users: ["ada"] } }],
};

/** Each spelling, the policy it is sent under, and what must happen. */
const CASES: { policy: unknown; uri: string; expect: "read" | "not_normal" | "refused" }[] = [
  { policy: SECRETS_FOR_SECURITY, uri: "gitlab://secrets/a", expect: "refused" },
  { policy: SECRETS_FOR_SECURITY, uri: "GITLAB://secrets/a", expect: "not_normal" },
  { policy: SECRETS_FOR_SECURITY, uri: " gitlab://secrets/a", expect: "not_normal" },
  { policy: SECRETS_FOR_SECURITY, uri: "gitlab://secr\tets/a", expect: "not_normal" },
  { policy: SECRETS_FOR_SECURITY, uri: "gitlab://projects/acme/readme", expect: "read" },
  { policy: DEFAULT_DENY, uri: "gitlab://projects/acme/readme", expect: "read" },
  { policy: DEFAULT_DENY, uri: "gitlab://projects/acme/../other/secret", expect: "not_normal" },
  { policy: DEFAULT_DENY, uri: "gitlab://projects/acme/%2e%2e/other/secret", expect: "not_normal" },
  { policy: DEFAULT_DENY, uri: "file:///srv/public/../secret.txt", expect: "not_normal" },
  { policy: DEFAULT_DENY, uri: "file:///srv/public/readme.txt", expect: "read" },
  { policy: DEFAULT_DENY, uri: "gitlab://projects/other/secret", expect: "refused" },
  { policy: DENY_ONE_FILE, uri: "file:///srv/secret.txt", expect: "refused" },
  { policy: DENY_ONE_FILE, uri: "file://localhost/srv/secret.txt", expect: "not_normal" },
];

const POLICY_ERROR_CODES = [-32003, -32403];

Deno.test("resource URIs: normal form as the URL parser writes it, patterns with * kept", () => {
  for (const uri of RESOURCES) assert.ok(isNormalUri(uri), uri);
  for (const { uri, expect } of CASES) assert.equal(isNormalUri(uri), expect !== "not_normal", uri);
  assert.equal(isNormalUri("not a uri"), false);
  assert.equal(isNormalUri(""), false);
  assert.equal(normalUriPattern("GITLAB://projects/acme/*"), "gitlab://projects/acme/*");
  assert.equal(normalUriPattern("file:///srv/public/../public/*"), "file:///srv/public/*");
  assert.equal(normalUriPattern("HTTPS://Example.COM/*/x"), "https://example.com/*/x");
  assert.equal(normalUriPattern("https://*.example.com/*"), "https://*.example.com/*");
  assert.equal(normalUriPattern("file://localhost/srv/*"), "file:///srv/*");
  assert.equal(normalUriPattern("*"), "*");
  assert.equal(normalUriPattern("wildcard://x/*"), "wildcard://x/*", "a placeholder clash");
  assert.equal(normalUriPattern("no scheme/*"), undefined);
});

Deno.test("resource URIs: a pattern that is not a URI stops the policy file", () => {
  for (const pattern of ["secrets/*", "*secret*", "http://[::1/*"]) {
    assert.throws(
      () =>
        parseCallPolicy(
          JSON.stringify({ rules: [{ resources: [pattern], deny: { users: ["x"] } }] }),
        ),
      (error: unknown) => error instanceof PolicyError && /not a URI/.test(error.message),
      pattern,
    );
  }
  // Tools and prompts are names, not URIs: their patterns are taken as written.
  parseCallPolicy(JSON.stringify({ rules: [{ tools: ["*secret*"], deny: { users: ["x"] } }] }));
});

Deno.test("resource URIs: a pattern whose normal form misses what it names as written stops start-up", async () => {
  // Each normal form would narrow a deny rule: mallory would read what the file refuses him.
  const cases: [string, string][] = [
    // A `/` follows the `*` in normal form: https://internal.example/secret escapes it.
    ["https://internal.example*", "https://internal.example/a"],
    ["https://*", "https://a/b"],
    // The parser writes the host as 10.0.0.5 once the `*` completes it.
    ["http://0x0a.0.0.*/", "http://10.0.0.0/"],
    // A `*` scheme keeps the host's case, which https folds.
    ["*://Secrets.example/*", "http://secrets.example/http"],
  ];
  for (const [pattern, missed] of cases) {
    const path = await Deno.makeTempFile({ suffix: ".json" });
    try {
      await Deno.writeTextFile(
        path,
        JSON.stringify({ rules: [{ resources: [pattern], deny: { users: ["mallory"] } }] }),
      );
      assert.throws(
        () => loadConfig({ MCP_POLICY_FILE: path, JWT_SECRET: TEST_SECRET }),
        (error: Error) => {
          assert.match(error.message, new RegExp(`^MCP_POLICY_FILE: ${path}: rule 0: `));
          assert.ok(error.message.includes(`misses ${JSON.stringify(missed)}`), error.message);
          return true;
        },
        pattern,
      );
    } finally {
      await Deno.remove(path);
    }
  }
  // What an operator means by the usual patterns is kept, whatever their spelling.
  const usual = [
    "gitlab://secrets/*",
    "GITLAB://projects/acme/*",
    "https://*.example.com/*",
    "HTTPS://Example.COM/*/x",
    "file://localhost/srv/*",
    "file:///srv/public/../public/*",
    "http://10.0.0.*/",
    "db://host/table?id=*",
    "gitlab:*",
    "*://x/*",
    "*",
  ];
  parseCallPolicy(JSON.stringify({ rules: [{ resources: usual, deny: { users: ["x"] } }] }));
});

/** A server of either SDK serving RESOURCES, recording what it read. */
interface ResourceServer {
  url: string;
  read: string[];
  close(): Promise<void>;
}

/** What both SDKs' servers offer to register a resource (the shape the tests use). */
interface ResourceRegistry {
  registerResource(
    name: string,
    uri: string,
    metadata: Record<string, never>,
    read: (asked: URL) => { contents: { uri: string; text: string }[] },
  ): unknown;
}

/** Registers RESOURCES on `server`, recording every read in `read`. */
function serveResources(server: ResourceRegistry, read: string[]): void {
  for (const uri of RESOURCES) {
    server.registerResource(uri, uri, {}, (asked) => {
      read.push(asked.href);
      return { contents: [{ uri: asked.href, text: `contents of ${asked.href}` }] };
    });
  }
}

function v1Server(): ResourceServer {
  const read: string[] = [];
  const served = serveMcp(() => {
    const server = new McpServerV1({ name: "resources-v1", version: "1.0.0" });
    serveResources(server, read);
    return server;
  }, {
    // No standalone GET stream: this test reads resources, and an SDK v1 client closing while
    // its GET is being opened can leave that stream, and so the servers' shutdown, hanging.
    refuse: (request) => request.method === "GET" ? new Response(null, { status: 405 }) : undefined,
  });
  return { url: served.url, read, close: served.close };
}

function v2Server(): ResourceServer {
  const read: string[] = [];
  const handler = createMcpHandler(() => {
    const server = new McpServerV2({ name: "resources-v2", version: "1.0.0" });
    serveResources(server, read);
    return server;
  });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) => handler.fetch(request),
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    read,
    async close() {
      await handler.close();
      await server.shutdown();
    },
  };
}

/** Reads `uri` through the gateway with the SDK's client: its text, or the JSON-RPC error. */
type Reader = (
  g: GatewayServer,
  uri: string,
) => Promise<{ text?: string; code?: number; message?: string }>;

/** What both SDKs' clients offer to read a resource and close (the shape the tests use). */
interface ResourceReader {
  readResource(params: { uri: string }): Promise<{ contents: unknown[] }>;
  close(): Promise<void>;
}

/** Reads `uri` with a connected client: its text, or the JSON-RPC error it answered. */
async function readWith(client: ResourceReader, uri: string) {
  try {
    const result = await client.readResource({ uri });
    return { text: String((result.contents[0] as { text?: string }).text) };
  } catch (error) {
    return { code: (error as { code?: number }).code, message: String(error) };
  } finally {
    await client.close();
  }
}

const readV1: Reader = async (g, uri) => {
  const client = new ClientV1({ name: "uri-test", version: "1.0.0" });
  await client.connect(
    new TransportV1(new URL(g.mcpUrl), {
      requestInit: { headers: { Authorization: `Bearer ${g.accessToken}` } },
    }),
  );
  return await readWith(client, uri);
};

const readV2: Reader = async (g, uri) => {
  const client = new ClientV2(
    { name: "uri-test", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(
    new TransportV2(new URL(g.mcpUrl), {
      authProvider: { token: () => Promise.resolve(g.accessToken) },
    }),
  );
  return await readWith(client, uri);
};

async function withPolicy<T>(policy: unknown, fn: (path: string) => Promise<T>): Promise<T> {
  const path = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(path, JSON.stringify(policy));
    return await fn(path);
  } finally {
    await Deno.remove(path);
  }
}

for (
  const [sdk, startServer, read] of [
    ["SDK v1 (2025-11-25)", v1Server, readV1],
    ["SDK v2 (2026-07-28)", v2Server, readV2],
  ] as const
) {
  Deno.test(`resource URIs through the gateway, ${sdk}: every spelling refused or read as its rule says`, async () => {
    const upstream = startServer();
    try {
      for (const policy of [SECRETS_FOR_SECURITY, DEFAULT_DENY, DENY_ONE_FILE]) {
        await withPolicy(policy, async (path) => {
          const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: path } });
          try {
            for (const { uri, expect } of CASES.filter((c) => c.policy === policy)) {
              upstream.read.length = 0;
              const before = auditLines(g.lines).length;
              const answer = await read(g, uri);
              const audited = auditLines(g.lines).slice(before)
                .filter((line) => line.method === "resources/read");
              if (expect === "read") {
                assert.match(answer.text ?? "", /^contents of /, `${uri}: ${answer.message}`);
                assert.equal(upstream.read.length, 1, uri);
                continue;
              }
              assert.deepEqual(upstream.read, [], `${JSON.stringify(uri)} reached the server`);
              if (expect === "not_normal") {
                assert.equal(answer.code, -32602, `${JSON.stringify(uri)}: ${answer.message}`);
              } else {
                assert.ok(
                  POLICY_ERROR_CODES.includes(answer.code ?? 0),
                  `${uri}: ${answer.message}`,
                );
              }
              assert.equal(audited.length, 1, `${JSON.stringify(uri)}: one audit line`);
              assert.equal(audited[0].policy, "deny", `${JSON.stringify(uri)} audited as allowed`);
            }
          } finally {
            await g.close();
          }
        });
      }
    } finally {
      await upstream.close();
    }
  });
}

Deno.test("resource URIs: resources/list drops items not in normal form, and matches the rest by it", async () => {
  const listed = [
    { uri: "gitlab://projects/acme/readme", name: "readme" },
    { uri: "GITLAB://projects/acme/other", name: "upper-case scheme" },
    { uri: "gitlab://projects/acme/../other/secret", name: "dot segments" },
    { uri: "gitlab://projects/other/secret", name: "not allowed" },
  ];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const message = await request.json();
    return Response.json({ jsonrpc: "2.0", id: message.id, result: { resources: listed } });
  });
  try {
    await withPolicy(DEFAULT_DENY, async (path) => {
      const g = await startGateway(`http://127.0.0.1:${server.addr.port}/mcp`, {
        env: { MCP_POLICY_FILE: path },
      });
      try {
        const response = await postToGateway(
          g,
          JSON.stringify({ jsonrpc: "2.0", id: 1, method: "resources/list" }),
        );
        const body = await response.json();
        assert.deepEqual(
          body.result.resources.map((item: { uri: string }) => item.uri),
          ["gitlab://projects/acme/readme"],
        );
      } finally {
        await g.close();
      }
    });
  } finally {
    await server.shutdown();
  }
});

Deno.test("resource URIs: resources/subscribe is refused out of normal form, and decided as a read", async () => {
  const methods: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const message = await request.json();
    methods.push(message.method);
    return Response.json({ jsonrpc: "2.0", id: message.id, result: {} });
  });
  try {
    await withPolicy(SECRETS_FOR_SECURITY, async (path) => {
      const g = await startGateway(`http://127.0.0.1:${server.addr.port}/mcp`, {
        env: { MCP_POLICY_FILE: path },
      });
      const subscribe = async (uri: string) => {
        const response = await postToGateway(
          g,
          JSON.stringify({
            jsonrpc: "2.0",
            id: 9,
            method: "resources/subscribe",
            params: { uri },
          }),
        );
        return await response.json();
      };
      try {
        assert.equal((await subscribe("GITLAB://secrets/a")).error.code, -32602);
        assert.ok(POLICY_ERROR_CODES.includes((await subscribe("gitlab://secrets/a")).error.code));
        assert.deepEqual(methods, [], "neither reached the MCP server");
        assert.deepEqual((await subscribe("gitlab://projects/acme/readme")).result, {});
        assert.deepEqual(methods, ["resources/subscribe"]);
      } finally {
        await g.close();
      }
    });
  } finally {
    await server.shutdown();
  }
});

Deno.test("resource URIs: a 2026-07-28 listen stream's resource subscriptions are decided as reads", async () => {
  const upstream = startMcpV2Upstream();
  const listens = () =>
    upstream.requests.filter(({ headers }) => headers.get("mcp-method") === "subscriptions/listen")
      .length;
  const policy = {
    default: "allow",
    rules: [{ resources: ["note://*"], allow: { groups: ["acme/security"] } }],
  };
  try {
    await withPolicy(policy, async (path) => {
      const g = await startGateway(upstream.url, { env: { MCP_POLICY_FILE: path } });
      const client = new ClientV2(
        { name: "uri-test", version: "1.0.0" },
        { versionNegotiation: { mode: { pin: "2026-07-28" } } },
      );
      await client.connect(
        new TransportV2(new URL(g.mcpUrl), {
          authProvider: { token: () => Promise.resolve(g.accessToken) },
        }),
      );
      const codeOf = async (uris: string[]) => {
        try {
          const subscription = await client.listen({ resourceSubscriptions: uris });
          await subscription.close();
          return undefined;
        } catch (error) {
          return (error as { code?: number }).code;
        }
      };
      try {
        const before = listens();
        assert.ok(POLICY_ERROR_CODES.includes(await codeOf([NOTE_URI]) ?? 0), "refused as a read");
        assert.equal(await codeOf(["NOTE://greeting"]), -32602, "not in normal form");
        assert.equal(listens(), before, "neither reached the MCP server");
        const refused = auditLines(g.lines).filter((line) =>
          line.method === "subscriptions/listen"
        );
        assert.deepEqual(refused.map((line) => [line.name, line.policy]), [
          [NOTE_URI, "deny"],
          ["NOTE://greeting", "deny"],
        ]);
        // A stream for what the policy does not name still opens.
        assert.equal(await codeOf(["other://x"]), undefined);
        assert.equal(listens(), before + 1);
      } finally {
        await client.close();
        await g.close();
      }
    });
  } finally {
    await upstream.close();
  }
});
