/**
 * HEAD (RFC 9110 §9.3.2) over real HTTP: the documents that change nothing when read answer it
 * as GET, headers and length alike, with no body; the GETs that start or advance a sign-in
 * refuse it, so that a link checker's HEAD starts no GitLab flow.
 */

import assert from "node:assert/strict";
import { authorizeQuery, countRecords } from "./_helpers.ts";
import { serveTestApp } from "./_served_app.ts";

const READ_ONLY = [
  "/",
  "/healthz",
  "/readyz",
  "/.well-known/jwks.json",
  "/.well-known/oauth-authorization-server",
  "/.well-known/oauth-protected-resource",
  "/.well-known/oauth-protected-resource/mcp",
];

/** What a client reads of an answer: status, the headers that describe the body, the bytes. */
async function answer(url: string, method: string) {
  const response = await fetch(url, { method });
  const body = new Uint8Array(await response.arrayBuffer());
  return {
    status: response.status,
    type: response.headers.get("content-type"),
    length: response.headers.get("content-length"),
    cache: response.headers.get("cache-control"),
    cors: response.headers.get("access-control-allow-origin"),
    body,
  };
}

Deno.test("HEAD: every read-only document answers as GET does, headers and length, with no body", async () => {
  const served = await serveTestApp({});
  try {
    for (const path of READ_ONLY) {
      const get = await answer(`${served.url}${path}`, "GET");
      const head = await answer(`${served.url}${path}`, "HEAD");
      assert.equal(get.status, 200, path);
      assert.ok(get.body.length > 0, path);
      assert.deepEqual(
        { ...head, body: head.body.length },
        { ...get, body: 0, length: String(get.body.length) },
        path,
      );
    }
  } finally {
    await served.close();
  }
});

Deno.test("HEAD: /authorize and /oauth/poll refuse it with 405 and Allow, starting no sign-in", async () => {
  const served = await serveTestApp({});
  try {
    const t = served.current();
    for (const path of [`/authorize?${authorizeQuery()}`, "/oauth/poll?flow_state=x"]) {
      const response = await fetch(`${served.url}${path}`, { method: "HEAD" });
      await response.body?.cancel();
      assert.equal(response.status, 405, path);
      assert.equal(response.headers.get("allow"), "GET", path);
    }
    assert.equal(t.upstream.calls.start, 0);
    assert.equal(await countRecords(t.kv, "flow"), 0);
  } finally {
    await served.close();
  }
});
