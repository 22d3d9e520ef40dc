/**
 * The GitLab token refresh's lease outlasts UPSTREAM_TIMEOUT_MS: a refresh that takes longer than
 * the old fixed 30 s (as a time limit of a minute allows) must not let a second instance take
 * the lease and spend the same GitLab refresh token again (found by a store review).
 */

import assert from "node:assert/strict";
import { createStore } from "../src/store/mod.ts";
import { createSecretBox } from "../src/secret_box.ts";
import { silentLogger } from "../src/logger.ts";
import { createVerifiedTokens } from "../src/gateway/verified_tokens.ts";
import { ensureFreshUpstreamToken } from "../src/session/upstream_refresh.ts";
import type { SessionRecord } from "../src/store/records.ts";
import type { Upstream } from "../src/upstream/types.ts";
import { FakeClock, TEST_SECRET } from "./_helpers.ts";

Deno.test("upstream refresh: a refresh slower than 30 s (within UPSTREAM_TIMEOUT_MS) is sent once", async () => {
  const kv = await Deno.openKv(":memory:");
  const clock = new FakeClock();
  const box = createSecretBox([TEST_SECRET]);
  // Two instances on one store.
  const [a, b] = [createStore(kv, clock, box), createStore(kv, clock, box)];
  const now = clock.now();
  const session: SessionRecord = {
    id: "s1",
    mcpRefreshTokenHash: "h",
    mcpTokenExpiry: 0,
    sealedUpstreamTokens: await a.sealUpstreamTokens({
      accessToken: "a1",
      refreshToken: "gitlab-refresh-1",
    }),
    upstreamTokenExpiry: now + 60_000,
    upstreamUserId: "1",
    upstreamUsername: "u",
    clientId: "c",
    scopes: [],
    createdAt: now,
    updatedAt: now,
    expiresAt: now + 86_400_000,
  };
  assert.ok(
    await a.completeSignIn({
      code: "code-1",
      codeRecord: {
        sessionId: "s1",
        clientId: "c",
        codeChallenge: "x",
        codeChallengeMethod: "S256",
        expiresAt: now + 600_000,
      },
      session,
    }),
  );
  const stored = await a.getSession("s1");
  assert.ok(stored);
  const spent: string[] = [];
  const { promise: answered, resolve: answer } = Promise.withResolvers<void>();
  const upstream = {
    async refreshTokens(refreshToken: string) {
      spent.push(refreshToken);
      await answered;
      return { accessToken: "a2", refreshToken: "gitlab-refresh-2", expiresInSeconds: 7200 };
    },
  } as unknown as Upstream;
  const upstreamTimeoutMs = 60_000;
  const verifiedTokens = createVerifiedTokens();
  const first = ensureFreshUpstreamToken({
    store: a,
    clock,
    upstream,
    logger: silentLogger,
    verifiedTokens,
    upstreamTimeoutMs,
  }, stored);
  while (spent.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
  clock.advance(31_000); // 31 s into the first instance's GitLab call
  const second = ensureFreshUpstreamToken({
    store: b,
    clock,
    upstream,
    logger: silentLogger,
    verifiedTokens,
    upstreamTimeoutMs,
  }, stored);
  await new Promise((resolve) => setTimeout(resolve, 200));
  answer();
  await Promise.all([first, second]);
  kv.close();
  assert.deepEqual(spent, ["gitlab-refresh-1"], "the GitLab refresh token was sent once");
});
