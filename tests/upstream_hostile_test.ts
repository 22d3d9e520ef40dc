/**
 * What a hostile or broken GitLab (or anyone in the way of plain http) may send, as the upstream
 * client reads it (found by a review): a membership awaiting approval is not one, answers are
 * read up to 1 MiB, and lifetimes and intervals are taken within sane bounds, so nothing of it
 * reaches the store as a value it cannot hold.
 */

import assert from "node:assert/strict";
import { processGitLabMemberResponse, processGitLabUserResponse } from "../src/upstream/gitlab.ts";
import {
  processDeviceAuthorizationResponse,
  processTokenResponse,
} from "../src/upstream/oauth_http.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import { authorize, makeTestApp } from "./_helpers.ts";

const json = (body: unknown) =>
  new Response(JSON.stringify(body), { headers: { "Content-Type": "application/json" } });

Deno.test("upstream: a membership awaiting approval admits no one", async () => {
  const member = { id: 7, username: "eve", state: "active", access_level: 30 };
  assert.equal(await processGitLabMemberResponse(json(member)), 30);
  assert.equal(
    await processGitLabMemberResponse(json({ ...member, membership_state: "active" })),
    30,
  );
  const awaiting = { ...member, membership_state: "awaiting" };
  assert.equal(await processGitLabMemberResponse(json(awaiting)), null);
});

Deno.test("upstream: an answer over 1 MiB is refused without being read whole", async () => {
  let sent = 0;
  const padding = new Uint8Array(64 * 1024).fill(0x20);
  const endless = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"id":1,"username":"ada","x":"'));
    },
    pull(controller) {
      sent += padding.byteLength;
      controller.enqueue(padding);
    },
  });
  const refused = await processGitLabUserResponse(new Response(endless)).catch((error) => error);
  assert.ok(refused instanceof UpstreamError, String(refused));
  assert.match(refused.message, /too large/);
  assert.ok(sent <= 2 * 1024 * 1024, `${sent} bytes pulled`);
  const declared = new Response("{}", { headers: { "Content-Length": String(2 * 1024 * 1024) } });
  await assert.rejects(() => processGitLabUserResponse(declared), /too large/);
});

Deno.test("upstream: expires_in and interval are taken in whole seconds within bounds", async () => {
  const device = (fields: Record<string, number>) =>
    processDeviceAuthorizationResponse(json({
      device_code: "d",
      user_code: "U",
      verification_uri: "https://gitlab.example.com/oauth/device",
      expires_in: 300,
      ...fields,
    }));
  assert.equal((await device({ expires_in: 300.0005 })).expiresInSeconds, 300);
  assert.equal((await device({ expires_in: 1e306 })).expiresInSeconds, 3600);
  assert.equal((await device({ expires_in: 0.25 })).expiresInSeconds, 1);
  assert.equal((await device({ interval: 0.0005 })).intervalSeconds, 1);
  assert.equal((await device({ interval: 1e306 })).intervalSeconds, 300);
  const token = await processTokenResponse(json({ access_token: "a", expires_in: 1e306 }));
  assert.ok(Number.isFinite(Date.now() + (token.expiresInSeconds ?? 0) * 1000));
});

Deno.test("store: a record's lifetime in a fraction of a millisecond, or of centuries, is stored", async () => {
  for (const expiresInSeconds of [300.0005, 1e10]) {
    const t = await makeTestApp();
    try {
      // The fake upstream skips the parser's bounds: the store must take what reaches it.
      t.upstream.device = { ...t.upstream.device, expiresInSeconds };
      const response = await authorize(t);
      assert.equal(response.status, 200, `${expiresInSeconds}`);
      await response.body?.cancel();
    } finally {
      t.close();
    }
  }
});
