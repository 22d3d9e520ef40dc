/**
 * Issue 22 §1.9: the metadata-document SSRF guard fails closed. A failing A or AAAA lookup
 * (other than "no such record") refuses the host, and the IPv4-translated (`::ffff:0:0:0/96`)
 * and local-use NAT64 (`64:ff9b:1::/48`) ranges are not public.
 */

import assert from "node:assert/strict";
import { isPublicAddress } from "../src/client_metadata/address.ts";
import {
  createClientMetadataFetcher,
  type ResolveAddresses,
} from "../src/client_metadata/fetcher.ts";

function fetcherResolving(resolve: ResolveAddresses) {
  return createClientMetadataFetcher({ allowPrivate: false, resolve });
}

Deno.test("cimd SSRF: a failing AAAA lookup refuses the host even when A answers public", async () => {
  const fetcher = fetcherResolving((_host, type) =>
    type === "A"
      ? Promise.resolve(["93.184.215.14"])
      : Promise.reject(new Deno.errors.TimedOut("dns timed out"))
  );
  await assert.rejects(
    fetcher.fetchDocument(new URL("https://split.example/client.json")),
    /could not be resolved/,
  );
});

Deno.test("cimd SSRF: a failing A lookup refuses the host even when AAAA answers public", async () => {
  const fetcher = fetcherResolving((_host, type) =>
    type === "AAAA" ? Promise.resolve(["2606:4700::1111"]) : Promise.reject(new Error("SERVFAIL"))
  );
  await assert.rejects(
    fetcher.fetchDocument(new URL("https://split.example/client.json")),
    /could not be resolved/,
  );
});

Deno.test("cimd SSRF: no AAAA record at all (NotFound) is not a failure", async () => {
  const fetcher = fetcherResolving((_host, type) =>
    type === "A"
      ? Promise.resolve(["10.0.0.1"])
      : Promise.reject(new Deno.errors.NotFound("no record found"))
  );
  // Reaches the address check (and is refused there for the private A record), not the lookup.
  await assert.rejects(
    fetcher.fetchDocument(new URL("https://v4only.example/client.json")),
    /private or reserved address/,
  );
});

Deno.test("cimd SSRF: IPv4-translated and local-use NAT64 addresses are not public", () => {
  for (
    const address of [
      "::ffff:0:7f00:1",
      "::ffff:0:127.0.0.1",
      "::ffff:0:a00:1",
      "::ffff:0:5db8:d70e", // even a public IPv4 inside: the translator is not ours to judge
      "64:ff9b:1::a00:1",
      "64:ff9b:1:ffff::5db8:d70e",
    ]
  ) assert.equal(isPublicAddress(address), false, address);
  // The well-known NAT64 prefix keeps its embedded-address rule.
  assert.equal(isPublicAddress("64:ff9b::5db8:d70e"), true);
  assert.equal(isPublicAddress("64:ff9b::7f00:1"), false);
});
