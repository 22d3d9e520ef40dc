import assert from "node:assert/strict";
import { findSessionByRefreshToken, isCurrentRefreshToken } from "../src/session/life.ts";
import { createSecretBox } from "../src/secret_box.ts";
import { sessionKey } from "../src/store/keys.ts";
import { createStore } from "../src/store/mod.ts";
import { sessionFromStored, type SessionRecord } from "../src/store/records.ts";
import { newSessionToken, refreshTokenHash } from "../src/store/session_tokens.ts";
import { FakeClock, TEST_SECRET } from "./_helpers.ts";

/** A session exactly as a release before the provider-neutral names wrote it. */
function legacySession(clock: FakeClock, id: string, sealed: string, refreshToken: string) {
  const now = clock.now();
  return {
    id,
    mcpRefreshTokenHash: refreshTokenHash(refreshToken),
    mcpTokenExpiry: now + 3600_000,
    sealedGitLabTokens: sealed,
    gitlabTokenExpiry: now + 7200_000,
    gitlabUserId: 4242,
    gitlabUsername: "ada",
    clientId: "client-1",
    scopes: ["mcp:tools", "mcp:resources"],
    createdAt: now,
    updatedAt: now,
    expiresAt: now + 86_400_000,
  };
}

Deno.test("records: sessions written under the GitLab field names still read", async (t) => {
  const clock = new FakeClock();
  const box = createSecretBox([TEST_SECRET]);
  const sealed = await box.seal(JSON.stringify({ accessToken: "gl-a", refreshToken: "gl-r" }));
  const id = crypto.randomUUID();
  const refreshToken = newSessionToken(id);
  const legacy = legacySession(clock, id, sealed, refreshToken);

  await t.step("sessionFromStored maps every renamed field", () => {
    const session = sessionFromStored(legacy as unknown as SessionRecord);
    assert.equal(session.sealedUpstreamTokens, sealed);
    assert.equal(session.upstreamTokenExpiry, legacy.gitlabTokenExpiry);
    assert.equal(session.upstreamUserId, "4242", "ids are text now");
    assert.equal(session.upstreamUsername, "ada");
    assert.ok(!("sealedGitLabTokens" in session), "no legacy field is kept");
  });

  await t.step("through the store: found by its refresh token, tokens open", async () => {
    await using kv = await Deno.openKv(":memory:");
    const store = createStore(kv, clock, box);
    await kv.set(sessionKey(id), legacy);
    const found = await findSessionByRefreshToken(store, refreshToken);
    assert.ok(found, "the legacy session is live");
    assert.ok(isCurrentRefreshToken(found.value, refreshToken));
    assert.equal(found.value.upstreamUsername, "ada");
    assert.deepEqual(await store.openUpstreamTokens(found.value), {
      accessToken: "gl-a",
      refreshToken: "gl-r",
    });
  });

  await t.step("written back under today's names", async () => {
    await using kv = await Deno.openKv(":memory:");
    const store = createStore(kv, clock, box);
    await kv.set(sessionKey(id), legacy);
    const found = (await store.getSession(id))!;
    assert.ok(await store.saveSession(found, { ...found.value, updatedAt: clock.now() + 1 }));
    const raw = (await kv.get<Record<string, unknown>>(sessionKey(id))).value!;
    assert.equal(raw.upstreamUserId, "4242");
    assert.ok(!("gitlabUserId" in raw));
  });
});
