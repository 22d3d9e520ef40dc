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
import { createAppDeps } from "../src/app/deps.ts";
import { createApp, type FetchHandler } from "../src/app/app.ts";
import { loadConfig } from "../src/app/config.ts";
import { createLogger } from "../src/logger.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  authorize,
  authorizeQuery,
  countRecords,
  FakeClock,
  makeTestApp,
  poll,
  startFlow,
  TEST_BASE,
  TEST_SECRET,
} from "./_helpers.ts";

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

/**
 * A GitLab on loopback answering the device flow with `device`, `token` and `user` merged into
 * sane answers, and the real app (real GitLab client, `:memory:` KV) in front of it.
 */
async function withHostileGitLab(
  answers: { device?: object; token?: object; user?: object },
  fn: (app: FetchHandler, kv: Deno.Kv, logs: string[]) => Promise<void>,
): Promise<void> {
  const gitlab = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (request) => {
    switch (new URL(request.url).pathname) {
      case "/oauth/authorize_device":
        return Response.json({
          device_code: "device-code",
          user_code: "ABCD-EFGH",
          verification_uri: "https://gitlab.example.com/oauth/device",
          expires_in: 300,
          ...answers.device,
        });
      case "/oauth/token":
        return Response.json({ access_token: "a", refresh_token: "r", ...answers.token });
      case "/api/v4/user":
        return Response.json({ id: 7, username: "ada", ...answers.user });
      default:
        return Response.json({});
    }
  });
  const config = loadConfig({
    GITLAB_URL: `http://127.0.0.1:${gitlab.addr.port}`,
    GITLAB_CLIENT_ID: "hostile-app",
    JWT_SECRET: TEST_SECRET,
    BASE_URL: TEST_BASE,
  });
  const logs: string[] = [];
  const kv = await Deno.openKv(":memory:");
  const deps = createAppDeps(config, {
    kv,
    clock: new FakeClock(Date.now()),
    logger: createLogger((line) => logs.push(line)),
    templates: await loadTemplates(),
  });
  try {
    await fn(createApp(deps), kv, logs);
  } finally {
    kv.close();
    await gitlab.shutdown();
  }
}

const LONG = "x".repeat(70_000);

Deno.test("upstream: a device code or user code too long or unprintable to keep fails the start as GitLab failing", async (t) => {
  for (
    const [name, device] of Object.entries({
      "70 000-character device_code": { device_code: LONG },
      "user_code with a newline": { user_code: "ABCD\nEFGH" },
      "70 000-character verification_uri": { verification_uri: `https://g.example/${LONG}` },
    })
  ) {
    await t.step(name, () =>
      withHostileGitLab({ device }, async (app, kv, logs) => {
        const response = await app(new Request(`${TEST_BASE}/authorize?${authorizeQuery()}`));
        assert.equal(response.status, 500);
        assert.deepEqual(await response.json(), {
          error: "server_error",
          error_description: "Failed to initiate authentication",
        });
        assert.deepEqual(await recordsOf(kv), []);
        const failed = logs.find((line) => line.includes("device flow start failed")) ?? "";
        assert.match(failed, /UpstreamError: upstream device authorization response is malformed/);
      }));
  }
});

Deno.test("upstream: tokens or a username too long or unprintable to keep leave the flow pending, never a 500", async (t) => {
  for (
    const [name, answers] of Object.entries({
      "70 000-character access_token": { token: { access_token: LONG } },
      "70 000-character refresh_token": { token: { refresh_token: LONG } },
      "refresh_token with a control character": { token: { refresh_token: "r\u0000" } },
      "70 000-character username": { user: { username: LONG } },
      "username with terminal escapes": { user: { username: "ada\u001b[2J\r\nroot" } },
    })
  ) {
    await t.step(name, () =>
      withHostileGitLab(answers, async (app, kv, logs) => {
        const flowState = await startFlow({ app });
        const response = await poll({ app }, flowState);
        assert.equal(response.status, 200);
        assert.deepEqual(await response.json(), { status: "pending" });
        assert.equal(await countRecords(kv, "session"), 0);
        assert.deepEqual(logs.filter((line) => line.includes("unhandled error")), []);
        assert.ok(logs.some((line) => line.includes("is malformed")), logs.join("\n"));
      }));
  }
});
