/**
 * Issue 11's abuse caps beyond registration (tests/register_test.ts) and revocation
 * (tests/revoke_test.ts): an authorization code never redeemed leaves nothing behind, and a
 * request body must arrive in time.
 */

import assert from "node:assert/strict";
import { sweepAbandonedSignIns } from "../src/session/end.ts";
import { CODE_TTL_MS } from "../src/session/life.ts";
import { sessionIdOf } from "../src/store/session_tokens.ts";
import { denoKvBackend, type KvBackend, StoreUnavailableError } from "../src/store/backend.ts";
import type { StoreDatabase } from "../src/store/mod.ts";
import {
  assertError,
  countRecords,
  exchange,
  issueCode,
  makeTestAppOn,
  poll,
  refresh,
  startFlow,
  TEST_SECRET,
  type TestApp,
  withApp,
} from "./_helpers.ts";
import { spawnService } from "./_service.ts";

/** Completes a sign-in whose GitLab access token is `gitlabToken`; returns its code. */
async function signInWithGitLabToken(
  t: TestApp<StoreDatabase>,
  gitlabToken: string,
): Promise<string> {
  const flowState = await startFlow(t);
  t.upstream.approve({ accessToken: gitlabToken, refreshToken: `${gitlabToken}-refresh` });
  const body = await (await poll(t, flowState)).json();
  assert.equal(body.status, "complete", JSON.stringify(body));
  return body.code;
}

Deno.test("unredeemed code: its session and GitLab token go when the code expires, not 30 days later", () =>
  withApp(async (t) => {
    const code = await signInWithGitLabToken(t, "gl-abandoned");
    const sessionId = sessionIdOf(code);
    assert.ok(sessionId);
    t.clock.advance(CODE_TTL_MS + 1);
    assert.equal(await t.store.getSession(sessionId), null, "the session expired with its code");
    await assertError(await exchange(t, code), 400, "invalid_grant");

    // The next sign-in sweeps the abandoned one: its GitLab token is revoked, its records go.
    await issueCode(t);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-abandoned"]);
    assert.equal(await countRecords(t.kv, "unredeemed"), 1, "only the new sign-in's");
    assert.equal(await countRecords(t.kv, "session"), 1, "only the new sign-in's");
  }));

Deno.test("unredeemed code: a code redeemed in its last moment gives its session the full life", () =>
  withApp(async (t) => {
    const code = await signInWithGitLabToken(t, "gl-kept");
    t.clock.advance(CODE_TTL_MS);
    const exchanged = await exchange(t, code);
    assert.equal(exchanged.status, 200);
    const { refresh_token } = await exchanged.json();
    assert.equal(await countRecords(t.kv, "unredeemed"), 0, "redeeming ends the watch");

    t.clock.advance(CODE_TTL_MS + 1);
    await issueCode(t);
    assert.deepEqual(t.upstream.revokedTokens, [], "a redeemed sign-in is never swept");
    t.clock.advance(29 * 86_400_000);
    const refreshed = await refresh(t, refresh_token);
    assert.equal(refreshed.status, 200, "the session keeps its 30-day life");
    await refreshed.body?.cancel();
  }));

Deno.test("unredeemed code: parallel sweeps revoke each abandoned GitLab token exactly once", () =>
  withApp(async (t) => {
    const abandoned = ["gl-a", "gl-b", "gl-c"];
    for (const token of abandoned) await signInWithGitLabToken(t, token);
    t.clock.advance(CODE_TTL_MS + 1);
    const { store, logger, verifiedTokens } = t.deps;
    const deps = { store, logger, verifiedTokens, upstream: t.upstream };
    await Promise.all(Array.from({ length: 10 }, () => sweepAbandonedSignIns(deps, {})));
    assert.deepEqual(t.upstream.revokedTokens.sort(), abandoned);
    assert.equal(await countRecords(t.kv, "unredeemed"), 0);
    assert.equal(await countRecords(t.kv, "session"), 0);
  }));

Deno.test("unredeemed code: a sweep whose take of one sign-in fails still revokes the GitLab tokens of those it deleted", async () => {
  const kv = await Deno.openKv(":memory:");
  const failing: { sessionId?: string } = {};
  const backend = denoKvBackend(kv);
  const t = await makeTestAppOn<KvBackend>({
    ...backend,
    commit(write) {
      const deletesFailing = write.mutations.some((mutation) =>
        mutation.type === "delete" && mutation.key[0] === "session" &&
        mutation.key[1] === failing.sessionId
      );
      return deletesFailing
        ? Promise.reject(new StoreUnavailableError("KV storage unavailable: disk I/O error"))
        : backend.commit(write);
    },
  });
  try {
    const abandoned = ["gl-1", "gl-2", "gl-3"];
    const codes = [];
    for (const token of abandoned) codes.push(await signInWithGitLabToken(t, token));
    failing.sessionId = sessionIdOf(codes[1]) ?? undefined;
    t.clock.advance(CODE_TTL_MS + 1);
    const { store, logger, verifiedTokens } = t.deps;
    const deps = { store, logger, verifiedTokens, upstream: t.upstream };
    await sweepAbandonedSignIns(deps, {});
    // The two taken are deleted: no later sweep would find them, so they are revoked now.
    assert.deepEqual(t.upstream.revokedTokens.sort(), ["gl-1", "gl-3"]);
    assert.equal(await countRecords(kv, "unredeemed"), 1, "the one not taken waits");
    failing.sessionId = undefined;
    await sweepAbandonedSignIns(deps, {});
    assert.deepEqual(t.upstream.revokedTokens.sort(), abandoned);
  } finally {
    t.close();
    kv.close();
  }
});

Deno.test("unredeemed code: a sweep that fails does not fail the sign-in that ran it", () =>
  withApp(async (t) => {
    t.deps.store.takeAbandonedSignIns = () => Promise.reject(new Error("KV unavailable"));
    const code = await signInWithGitLabToken(t, "gl-fine");
    const exchanged = await exchange(t, code);
    assert.equal(exchanged.status, 200);
    await exchanged.body?.cancel();
  }));

// ---- request bodies must arrive in time -----------------------------------------------------

const BODY_TIMEOUT_MS = 300;
const TRICKLE_STEP_MS = 50;
/** Long enough for ten timeouts; without one the server is still waiting when it ends. */
const TRICKLE_STEPS = (10 * BODY_TIMEOUT_MS) / TRICKLE_STEP_MS;

/**
 * Sends a request announcing a 1000-byte body over a raw TCP connection, then one byte every
 * TRICKLE_STEP_MS (a slowloris client), until a whole response has arrived or the trickle has
 * run TRICKLE_STEPS steps; answers what arrived.
 */
async function trickleRequest(serviceUrl: string, path: string, contentType: string) {
  const { hostname, port, host } = new URL(serviceUrl);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const encoder = new TextEncoder();
  await conn.write(encoder.encode(
    `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: ${contentType}\r\n` +
      "Content-Length: 1000\r\n\r\n",
  ));
  let received = "";
  const reading = (async () => {
    const buffer = new Uint8Array(4096);
    for (;;) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) return;
      received += new TextDecoder().decode(buffer.subarray(0, n));
    }
  })();
  for (let step = 0; step < TRICKLE_STEPS && !isWholeResponse(received); step++) {
    await new Promise((resolve) => setTimeout(resolve, TRICKLE_STEP_MS));
    await conn.write(encoder.encode("a")).catch(() => 0);
  }
  conn.close();
  await reading;
  return received;
}

/** Whether `text` holds a response's head and the whole body its content-length announces. */
function isWholeResponse(text: string): boolean {
  const end = text.indexOf("\r\n\r\n");
  const length = text.match(/^content-length: (\d+)\r$/im);
  return end >= 0 && length !== null && text.length >= end + 4 + Number(length[1]);
}

Deno.test("body timeout: a body still trickling after REQUEST_BODY_TIMEOUT_MS gets 408 and its request is abandoned", async () => {
  const service = await spawnService({
    GITLAB_CLIENT_ID: "body-timeout-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
    REQUEST_BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS),
  });
  try {
    const cases = [
      ["/token", "application/x-www-form-urlencoded"],
      ["/revoke", "application/x-www-form-urlencoded"],
      ["/register", "application/json"],
    ];
    for (const [path, contentType] of cases) {
      const received = await trickleRequest(service.url, path, contentType);
      assert.match(received, /^HTTP\/1\.1 408 /, `${path}: ${received || "no answer"}`);
      assert.match(received, /^connection: close\r$/im, `${path}: not kept alive`);
      const body = JSON.parse(received.slice(received.indexOf("\r\n\r\n") + 4));
      assert.deepEqual(body, {
        error: "invalid_request",
        error_description: `Request body not received within ${BODY_TIMEOUT_MS} ms`,
      });
      const logged = service.logs.some((line) =>
        line.includes(`"path":"${path}"`) && line.includes('"status":408')
      );
      assert.ok(logged, `${path}: the request was finished (its log line written)`);
    }
  } finally {
    assert.equal(await service.stop(), 0);
  }
});

Deno.test("body timeout: a slow body that arrives within the limit is read as usual", async () => {
  const service = await spawnService({
    GITLAB_CLIENT_ID: "body-timeout-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: ":memory:",
  });
  try {
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        for (const part of ["grant_type=", "password"]) {
          controller.enqueue(new TextEncoder().encode(part));
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        controller.close();
      },
    });
    const response = await fetch(`${service.url}/token`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body,
    });
    await assertError(response, 400, "unsupported_grant_type");
  } finally {
    assert.equal(await service.stop(), 0);
  }
});
