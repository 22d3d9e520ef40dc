/**
 * Client ID Metadata Documents against the real app, with the documents served over real https
 * on loopback (a test CA the injected fetcher trusts): validation, redirect URI exactness under
 * every policy, the KV cache (Cache-Control clamped to 5 minutes … 24 hours, shared by
 * instances, stale on error while kept), the SSRF guard, the page's verified host, and `/token`
 * under REDIRECT_URI_POLICY=registered.
 */

import assert from "node:assert/strict";
import { createApp } from "../src/app/app.ts";
import {
  createClientMetadataFetcher,
  type FetcherOptions,
  MAX_DOCUMENT_BYTES,
} from "../src/client_metadata/fetcher.ts";
import { isPublicAddress } from "../src/client_metadata/address.ts";
import { loadConfig } from "../src/app/config.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { silentLogger } from "../src/logger.ts";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import {
  assertError,
  authorize,
  countRecords,
  exchange,
  issueCode,
  makeTestApp,
  register,
  TEST_BASE,
  TEST_REDIRECT,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { type DocumentServer, startDocumentServer } from "./_tls.ts";

const DOC_PATH = "/oauth/client.json";
const MINUTE = 60_000;

interface Rig {
  t: TestApp;
  docs: DocumentServer;
  clientId: string;
  httpClient: Deno.HttpClient;
}

/** The metadata document a well-behaved client publishes at `clientId`. */
function documentOf(clientId: string, extra: Record<string, unknown> = {}) {
  return {
    client_id: clientId,
    client_name: "Claude",
    redirect_uris: [TEST_REDIRECT],
    token_endpoint_auth_method: "none",
    ...extra,
  };
}

/** An app whose fetcher trusts the test CA; the document server answers the valid document. */
async function withCimd(
  fn: (r: Rig) => Promise<void>,
  options: { env?: Record<string, string>; fetcher?: Partial<FetcherOptions> } = {},
): Promise<void> {
  const docs = await startDocumentServer();
  const httpClient = Deno.createHttpClient({ caCerts: [docs.caPem] });
  const clientId = `${docs.origin}${DOC_PATH}`;
  docs.route(DOC_PATH, () => Response.json(documentOf(clientId)));
  const fetcher = createClientMetadataFetcher({
    allowPrivate: true,
    httpClient,
    timeoutMs: 1000,
    ...options.fetcher,
  });
  const t = await makeTestApp({ env: options.env, clientMetadataFetcher: fetcher });
  try {
    await fn({ t, docs, clientId, httpClient });
  } finally {
    t.close();
    httpClient.close();
    await docs.close();
  }
}

async function assertPage(response: Response): Promise<string> {
  const html = await response.text();
  assert.equal(response.status, 200, html);
  return html;
}

Deno.test("cimd: a valid document is fetched once with Accept: application/json; the page names its host as verified", () =>
  withCimd(async ({ t, docs, clientId }) => {
    const html = await assertPage(await authorize(t, { client_id: clientId }));
    assert.match(html, /<strong><bdi>Claude<\/bdi><\/strong> wants to sign you in/);
    const host = new URL(clientId).host;
    assert.match(html, new RegExp(`id="client-verified"[^>]*>[^<]*<strong><bdi>${host}</bdi>`));
    assert.doesNotMatch(html, /id="client-unverified"/);
    assert.deepEqual(docs.accepts, ["application/json"]);
    assert.equal(await countRecords(t.kv, "client_metadata"), 1);

    await assertPage(await authorize(t, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 1, "the second request used the cached copy");
  }));

Deno.test("cimd: a name from /register is shown as unverified, with no verified host", () =>
  withCimd(async ({ t }) => {
    const registered = await register(t, { redirect_uris: [TEST_REDIRECT], client_name: "Claude" });
    const { client_id } = await registered.json();
    const html = await assertPage(await authorize(t, { client_id }));
    assert.match(html, /<strong><bdi>Claude<\/bdi><\/strong> wants to sign you in/);
    assert.match(html, /id="client-unverified"[^>]*>[^<]*unverified/);
    assert.doesNotMatch(html, /id="client-verified"/);
  }));

Deno.test("cimd: the document's client_name is escaped on the page", () =>
  withCimd(async ({ t, docs, clientId }) => {
    docs.route(
      DOC_PATH,
      () => Response.json(documentOf(clientId, { client_name: `<img src=x onerror=alert(1)>` })),
    );
    const html = await assertPage(await authorize(t, { client_id: clientId }));
    assert.ok(!html.includes("<img src=x"), "no markup from the document");
    assert.ok(html.includes("&lt;img src=x onerror=alert(1)&gt;"));
  }));

Deno.test("cimd: the redirect_uri must be the document's under every policy; loopback ports may vary", async () => {
  for (const policy of ["any", "registered"]) {
    await withCimd(async ({ t, clientId }) => {
      await assertError(
        await authorize(t, { client_id: clientId, redirect_uri: "https://evil.example/cb" }),
        400,
        "invalid_request",
        /not listed in the client's metadata document/,
      );
      await assertPage(
        await authorize(t, {
          client_id: clientId,
          redirect_uri: "http://127.0.0.1:41000/callback",
        }),
      );
      // A sole redirect URI may be left out; the code then goes there.
      await assertPage(await authorize(t, { client_id: clientId, redirect_uri: null }));
    }, { env: { REDIRECT_URI_POLICY: policy } });
  }
});

Deno.test("cimd: a document whose grant_types lack authorization_code (a device-only client) → 400 unauthorized_client at /authorize, under every policy, the device grant served or not", async () => {
  const envs: Record<string, string>[] = [
    { REDIRECT_URI_POLICY: "any" },
    { REDIRECT_URI_POLICY: "registered" },
    { DEVICE_AUTHORIZATION: "off" },
  ];
  for (const env of envs) {
    await withCimd(async ({ t, docs, clientId }) => {
      docs.route(
        DOC_PATH,
        () => Response.json(documentOf(clientId, { grant_types: [DEVICE_CODE_GRANT_TYPE] })),
      );
      await assertError(
        await authorize(t, { client_id: clientId }),
        400,
        "unauthorized_client",
        /grant_types do not include authorization_code/,
      );
      assert.equal(await countRecords(t.kv, "flow"), 0, "no sign-in started");
      docs.route(
        DOC_PATH,
        () =>
          Response.json(
            documentOf(clientId, { grant_types: ["authorization_code", DEVICE_CODE_GRANT_TYPE] }),
          ),
      );
      t.clock.advance(6 * MINUTE);
      await assertPage(await authorize(t, { client_id: clientId }));
    }, { env });
  }
});

Deno.test("cimd: bad documents → 400 invalid_request naming the problem, nothing cached", async () => {
  const cases: [string, (clientId: string) => Response | Promise<Response>, RegExp][] = [
    [
      "wrong client_id",
      () => Response.json(documentOf("https://someone.else/client.json")),
      /client_id is not its URL/,
    ],
    [
      "too large, announced",
      (id) => Response.json(documentOf(id, { pad: "x".repeat(MAX_DOCUMENT_BYTES) })),
      /larger than 5120 bytes/,
    ],
    [
      "too large, streamed without a length",
      (id) => streamed(JSON.stringify(documentOf(id, { pad: "x".repeat(MAX_DOCUMENT_BYTES) }))),
      /larger than 5120 bytes/,
    ],
    [
      "not JSON",
      () => new Response("<html>hello</html>", { headers: { "Content-Type": "application/json" } }),
      /not JSON/,
    ],
    [
      "the document served as a web page",
      (id) =>
        new Response(JSON.stringify(documentOf(id)), {
          headers: { "Content-Type": "text/html; charset=utf-8" },
        }),
      /not served as application\/json \(Content-Type: text\/html\)/,
    ],
    [
      "the document served without a Content-Type",
      (id) => {
        const response = new Response(JSON.stringify(documentOf(id)));
        response.headers.delete("Content-Type");
        return response;
      },
      /not served as application\/json \(Content-Type: none\)/,
    ],
    ["a JSON array", () => Response.json([1, 2]), /not a JSON object/],
    [
      "slow",
      async (id) => {
        await new Promise((resolve) => setTimeout(resolve, 1500));
        return Response.json(documentOf(id));
      },
      /did not arrive within 300 ms/,
    ],
    [
      "redirecting",
      () => new Response(null, { status: 302, headers: { Location: "/elsewhere.json" } }),
      /redirects are not followed/,
    ],
    ["missing", () => new Response("no", { status: 404 }), /HTTP 404/],
    [
      "no redirect_uris",
      (id) => Response.json(documentOf(id, { redirect_uris: [] })),
      /redirect_uris/,
    ],
    [
      "a confidential client",
      (id) => Response.json(documentOf(id, { token_endpoint_auth_method: "client_secret_basic" })),
      /token_endpoint_auth_method must be none/,
    ],
  ];
  for (const [label, answer, problem] of cases) {
    await withCimd(async ({ t, docs, clientId }) => {
      docs.route(DOC_PATH, () => answer(clientId));
      const body = await assertError(
        await authorize(t, { client_id: clientId }),
        400,
        "invalid_request",
      );
      assert.match(body.error_description, /^Client metadata document: /, label);
      assert.match(body.error_description, problem, label);
      assert.equal(await countRecords(t.kv, "client_metadata"), 0, label);
      assert.equal(t.upstream.calls.start, 0, `${label}: no device flow started`);
    }, { fetcher: { timeoutMs: 300 } });
  }
});

Deno.test("cimd: a document served as application/<something>+json with parameters is accepted", () =>
  withCimd(async ({ t, docs, clientId }) => {
    docs.route(DOC_PATH, () =>
      new Response(JSON.stringify(documentOf(clientId)), {
        headers: { "Content-Type": "Application/Client-Metadata+JSON; charset=utf-8" },
      }));
    await assertPage(await authorize(t, { client_id: clientId }));
  }));

function streamed(text: string): Response {
  const bytes = new TextEncoder().encode(text);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < bytes.length; i += 1024) controller.enqueue(bytes.slice(i, i + 1024));
      controller.close();
    },
  });
  return new Response(body, { headers: { "Content-Type": "application/json" } });
}

Deno.test("cimd: client ids that are URLs but no valid document address → 400 before any fetch", () =>
  withCimd(async ({ t, docs }) => {
    for (
      const clientId of [
        `${docs.origin}${DOC_PATH}#frag`,
        `${docs.origin}/oauth/../oauth/client.json`,
        `https://user:pw@${new URL(docs.origin).host}${DOC_PATH}`,
        `https://127.0.0.1:${new URL(docs.origin).port}/a b`,
      ]
    ) {
      await assertError(
        await authorize(t, { client_id: clientId }),
        400,
        "invalid_request",
        /^Client metadata/,
      );
    }
    assert.equal(docs.hits.size, 0);
    // An https URL without a path is an ordinary client id (spec §4.1: any id).
    await assertPage(await authorize(t, { client_id: "https://example.com" }));
  }));

Deno.test("cimd: SSRF guard: a private address is refused before connecting unless allowed", () =>
  withCimd(async ({ t, docs, clientId }) => {
    await assertError(
      await authorize(t, { client_id: clientId }),
      400,
      "invalid_request",
      "Client metadata document: the host resolves to a private or reserved address",
    );
    assert.equal(docs.hits.size, 0, "the document server was never contacted");
  }, { fetcher: { allowPrivate: false } }));

Deno.test("cimd: SSRF guard: every address of a name must be public; unresolvable names are refused", async () => {
  const answers: Record<string, string[]> = {
    "metadata.example": ["169.254.169.254"],
    "mixed.example": ["93.184.215.14", "10.0.0.5"],
    "cgnat.example": ["100.64.1.1"],
    "v6-loopback.example": ["::1"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "nowhere.example": [],
  };
  const fetcher = createClientMetadataFetcher({
    allowPrivate: false,
    resolve: (hostname, type) =>
      Promise.resolve(
        (answers[hostname] ?? []).filter((a) => a.includes(":") === (type === "AAAA")),
      ),
  });
  for (const [host, addresses] of Object.entries(answers)) {
    await assert.rejects(
      fetcher.fetchDocument(new URL(`https://${host}/client.json`)),
      addresses.length === 0 ? /does not resolve/ : /private or reserved address/,
      host,
    );
  }
  for (
    const literal of ["https://[::1]/c.json", "https://10.1.2.3/c.json", "https://0.0.0.0/c.json"]
  ) {
    await assert.rejects(fetcher.fetchDocument(new URL(literal)), /private or reserved/, literal);
  }
});

Deno.test("cimd: cached per Cache-Control: refetched after max-age, kept at least 5 minutes, stale on error while kept", () =>
  withCimd(async ({ t, docs, clientId }) => {
    let failing = false;
    docs.route(
      DOC_PATH,
      () =>
        failing ? new Response("down", { status: 503 }) : Response.json(documentOf(clientId), {
          headers: { "Cache-Control": "public, max-age=60" },
        }),
    );
    await assertPage(await authorize(t, { client_id: clientId }));
    t.clock.advance(59_000);
    await assertPage(await authorize(t, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 1, "fresh for max-age");

    t.clock.advance(2_000);
    await assertPage(await authorize(t, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 2, "refetched after max-age");

    failing = true;
    t.clock.advance(2 * MINUTE);
    await assertPage(await authorize(t, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 3, "a refetch was tried, and the kept copy used");

    t.clock.advance(4 * MINUTE);
    await assertError(
      await authorize(t, { client_id: clientId }),
      400,
      "invalid_request",
      /HTTP 503/,
    );
  }));

Deno.test("cimd: max-age beyond 24 hours is clamped; no-cache still keeps the copy 5 minutes", () =>
  withCimd(async ({ t, docs, clientId }) => {
    let cacheControl = "max-age=31536000";
    docs.route(
      DOC_PATH,
      () => Response.json(documentOf(clientId), { headers: { "Cache-Control": cacheControl } }),
    );
    await assertPage(await authorize(t, { client_id: clientId }));
    t.clock.advance(24 * 60 * MINUTE - 1_000);
    await assertPage(await authorize(t, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 1);
    cacheControl = "no-cache";
    t.clock.advance(2_000);
    await assertPage(await authorize(t, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 2, "refetched after 24 hours");

    // no-cache: every request revalidates, and a failure falls back to the copy for 5 minutes.
    docs.route(DOC_PATH, () => new Response("down", { status: 500 }));
    t.clock.advance(4 * MINUTE);
    await assertPage(await authorize(t, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 3);
    t.clock.advance(2 * MINUTE);
    await assertError(
      await authorize(t, { client_id: clientId }),
      400,
      "invalid_request",
      /HTTP 500/,
    );
  }));

Deno.test("cimd: the cache lives in KV, so another instance on the same KV does not fetch again", () =>
  withCimd(async ({ t, docs, clientId, httpClient }) => {
    await assertPage(await authorize(t, { client_id: clientId }));
    const other = createApp(
      createAppDeps(loadConfig(testEnv()), {
        kv: t.kv,
        clock: t.clock,
        logger: silentLogger,
        templates: loadTemplates(),
        upstream: t.upstream,
        clientMetadataFetcher: createClientMetadataFetcher({ allowPrivate: true, httpClient }),
      }),
    );
    await assertPage(await authorize({ app: other }, { client_id: clientId }));
    assert.equal(docs.hits.get(DOC_PATH), 1);
  }));

function testEnv(): Record<string, string> {
  return { GITLAB_CLIENT_ID: "gitlab-app-id", JWT_SECRET: TEST_SECRET, BASE_URL: TEST_BASE };
}

Deno.test("cimd: under REDIRECT_URI_POLICY=registered /token requires the document client's id, no registration needed", () =>
  withCimd(async ({ t, clientId }) => {
    const code = await issueCode(t, { client_id: clientId });
    await assertError(await exchange(t, code), 400, "invalid_request", "client_id is required");
    await assertError(
      await exchange(t, code, { client_id: "https://127.0.0.1:1/other/client.json" }),
      400,
      "invalid_grant",
    );
    const response = await exchange(t, code, { client_id: clientId });
    assert.equal(response.status, 200, await response.text());
  }, { env: { REDIRECT_URI_POLICY: "registered" } }));

Deno.test("cimd: with ALLOWED_REDIRECT_URIS a document listing no allowed redirect URI is refused", () =>
  withCimd(async ({ t, docs, clientId }) => {
    await assertError(
      await authorize(t, { client_id: clientId }),
      400,
      "invalid_request",
      /none of its redirect_uris is allowed/,
    );
    docs.route(
      DOC_PATH,
      () =>
        Response.json(
          documentOf(clientId, { redirect_uris: [TEST_REDIRECT, "https://ok.example/cb"] }),
        ),
    );
    t.clock.advance(6 * MINUTE);
    await assertPage(
      await authorize(t, { client_id: clientId, redirect_uri: "https://ok.example/cb" }),
    );
    // Listed in the document but not allowed: still refused.
    await assertError(
      await authorize(t, { client_id: clientId }),
      400,
      "invalid_request",
      /not allowed/,
    );
  }, { env: { ALLOWED_REDIRECT_URIS: "https://ok.example/*" } }));

Deno.test("cimd: SSRF guard: only public unicast addresses count as public", () => {
  const publicAddresses = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700::1111",
    "::ffff:8.8.8.8",
  ];
  const blocked = [
    "127.0.0.1",
    "10.1.2.3",
    "172.31.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "100.100.100.200",
    "169.254.169.254",
    "0.0.0.0",
    "224.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "[::1]",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "64:ff9b::10.0.0.1",
    "2002:a00:1::1",
    "fe80::1",
    "fd00:ec2::254",
    "ff02::1",
    "2001:db8::1",
    "not an address",
  ];
  for (const address of publicAddresses) assert.ok(isPublicAddress(address), address);
  for (const address of blocked) assert.ok(!isPublicAddress(address), address);
});
