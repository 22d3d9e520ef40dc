/**
 * The metadata-document fetch connects to the address the SSRF guard checked, never to what a
 * second lookup of the name answers (DNS rebinding), and still verifies the certificate for the
 * name. Two https servers on one port: the "published" one at 127.0.0.2, which the (fake) DNS
 * answer names and the guard approves, and an "internal" one at 127.0.0.1, where the system's
 * own lookup of `localhost` leads, as a rebinding DNS server's second answer would. Over real
 * HTTP against the app; the limits hold on this path too.
 */

import assert from "node:assert/strict";
import {
  createClientMetadataFetcher,
  type FetcherOptions,
  httpsProxyFor,
  type ResolveAddresses,
} from "../src/client_metadata/fetcher.ts";
import { assertError, authorize, makeTestApp, TEST_REDIRECT, type TestApp } from "./_helpers.ts";
import { generateCertificates } from "./_tls.ts";

const PUBLISHED = "127.0.0.2";
const INTERNAL = "127.0.0.1";
const DOC_PATH = "/oauth/client.json";

/** The fake DNS: `localhost` has the published address only. */
const resolve: ResolveAddresses = (hostname, type) =>
  hostname === "localhost" && type === "A"
    ? Promise.resolve([PUBLISHED])
    : Promise.reject(new Deno.errors.NotFound("no record"));

type Answer = (request: Request, clientId: string) => Response | Promise<Response>;

interface Rig {
  t: TestApp;
  clientId: string;
  hits: { published: number; internal: number };
  answer(answer: Answer): void;
}

async function withRebinding(
  fn: (rig: Rig) => Promise<void>,
  certificateFor: string[] = ["localhost"],
  options: Pick<FetcherOptions, "viaProxy"> = {},
): Promise<void> {
  const { caPem, certPem, keyPem } = await generateCertificates({ ips: [], dns: certificateFor });
  const hits = { published: 0, internal: 0 };
  let answer: Answer = (_request, clientId) =>
    Response.json({
      client_id: clientId,
      client_name: "Published",
      redirect_uris: [TEST_REDIRECT],
    });
  const serve = (hostname: string, port: number, handler: Deno.ServeHandler) =>
    Deno.serve({ hostname, port, cert: certPem, key: keyPem, onListen() {} }, handler);
  const published = serve(PUBLISHED, 0, (request) => {
    hits.published++;
    return answer(request, clientId);
  });
  const port = published.addr.port;
  const clientId = `https://localhost:${port}${DOC_PATH}`;
  const internal = serve(INTERNAL, port, () => {
    hits.internal++;
    return Response.json({
      client_id: clientId,
      client_name: "Internal",
      redirect_uris: [TEST_REDIRECT],
    });
  });
  const fetcher = createClientMetadataFetcher({
    allowPrivate: false,
    resolve,
    caCerts: [caPem],
    // In this test the published loopback address stands for a public one.
    isAllowedAddress: (address) => address === PUBLISHED,
    timeoutMs: 1000,
    ...options,
  });
  const t = await makeTestApp({ clientMetadataFetcher: fetcher });
  try {
    await fn({ t, clientId, hits, answer: (next) => void (answer = next) });
  } finally {
    t.close();
    await Promise.all([published.shutdown(), internal.shutdown()]);
  }
}

Deno.test("cimd pinned: the document comes from the address the guard checked, not from a second lookup of the name", () =>
  withRebinding(async ({ t, clientId, hits }) => {
    const response = await authorize(t, { client_id: clientId });
    const html = await response.text();
    assert.equal(response.status, 200, html);
    assert.match(html, /<bdi>Published<\/bdi>/);
    assert.deepEqual(hits, { published: 1, internal: 0 });
  }));

Deno.test("cimd pinned: a host NO_PROXY exempts from HTTPS_PROXY is fetched from the checked address too, as fetch would connect to it itself", () => {
  const proxy = { HTTPS_PROXY: "http://127.0.0.1:9", NO_PROXY: "intranet.example, localhost" };
  const viaProxy = httpsProxyFor(proxy);
  assert.equal(viaProxy(new URL("https://client.example/doc.json")), true, "others go through it");
  return withRebinding(
    async ({ t, clientId, hits }) => {
      const response = await authorize(t, { client_id: clientId });
      const html = await response.text();
      assert.equal(response.status, 200, html);
      assert.match(html, /<bdi>Published<\/bdi>/);
      assert.deepEqual(hits, { published: 1, internal: 0 });
    },
    ["localhost"],
    { viaProxy },
  );
});

Deno.test("cimd pinned: the certificate is still verified for the name", () =>
  withRebinding(async ({ t, clientId, hits }) => {
    await assertError(
      await authorize(t, { client_id: clientId }),
      400,
      "invalid_request",
      "Client metadata document: the document could not be fetched",
    );
    assert.equal(hits.internal, 0);
  }, ["other.example"]));

Deno.test("cimd pinned: redirects, oversized bodies, wrong types and slow answers (headers or body) are refused here too", () =>
  withRebinding(async ({ t, clientId, answer }) => {
    const refused = async (next: Answer, description: string | RegExp) => {
      answer(next);
      await assertError(
        await authorize(t, { client_id: clientId }),
        400,
        "invalid_request",
        description,
      );
    };
    await refused(
      () => new Response(null, { status: 302, headers: { Location: "https://127.0.0.1/" } }),
      "Client metadata document: the document URL redirects; redirects are not followed",
    );
    await refused(
      () =>
        new Response(
          ReadableStream.from([new TextEncoder().encode(`{"pad":"${"x".repeat(6000)}"}`)]),
          { headers: { "Content-Type": "application/json" } },
        ),
      /larger than 5120 bytes/,
    );
    await refused(
      (_request, id) =>
        new Response(JSON.stringify({ client_id: id }), {
          headers: { "Content-Type": "text/plain" },
        }),
      /not served as application\/json \(Content-Type: text\/plain\)/,
    );
    const held = Promise.withResolvers<void>();
    try {
      await refused(async (_request, id) => {
        await held.promise;
        return Response.json({ client_id: id });
      }, /did not arrive within 1000 ms/);
      // The headers in time, the body never finished: the same limit.
      await refused(
        (_request, id) =>
          new Response(
            new ReadableStream({
              async start(controller) {
                controller.enqueue(new TextEncoder().encode(`{"client_id":"${id}"`));
                await held.promise;
                controller.close();
              },
            }),
            { headers: { "Content-Type": "application/json" } },
          ),
        /did not arrive within 1000 ms/,
      );
    } finally {
      held.resolve();
    }
  }));
