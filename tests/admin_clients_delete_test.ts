/**
 * `admin clients delete` ends the sessions of a client that has no registration: under
 * REDIRECT_URI_POLICY=any any client id may sign in, and a registration lapses while refreshes
 * keep its sessions alive (found by a store review: the command said "no such client" and left
 * every session).
 */

import assert from "node:assert/strict";
import { createStore } from "../src/store/mod.ts";
import { createSecretBox } from "../src/secret_box.ts";
import { runStoreCommand } from "../src/admin/commands.ts";
import { silentLogger } from "../src/logger.ts";
import { FakeClock, TEST_SECRET } from "./_helpers.ts";

Deno.test("admin clients delete: an unregistered client's sessions end; none at all is exit 1", async () => {
  const kv = await Deno.openKv(":memory:");
  const clock = new FakeClock();
  const store = createStore(kv, clock, createSecretBox([TEST_SECRET]));
  const now = clock.now();
  await store.completeSignIn({
    code: "code-1",
    codeRecord: {
      sessionId: "s1",
      clientId: "client-x",
      codeChallenge: "x",
      codeChallengeMethod: "S256",
      expiresAt: now + 600_000,
    },
    session: {
      id: "s1",
      mcpRefreshTokenHash: "h",
      mcpTokenExpiry: 0,
      sealedUpstreamTokens: await store.sealUpstreamTokens({ accessToken: "a", refreshToken: "r" }),
      upstreamTokenExpiry: 0,
      upstreamUserId: "1",
      upstreamUsername: "u",
      clientId: "client-x",
      scopes: [],
      createdAt: now,
      updatedAt: now,
      expiresAt: now + 86_400_000,
    },
  });
  const deps = {
    store,
    logger: silentLogger,
    print: () => {},
    kvFileSize: () => Promise.resolve(undefined),
  };
  const command = { name: "clients delete", clientId: "client-x", keepGitLabTokens: true } as const;
  try {
    assert.equal(await runStoreCommand(command, deps), 0);
    assert.deepEqual(await store.listSessions({ clientId: "client-x" }), []);
    assert.equal(await runStoreCommand(command, deps), 1, "nothing left: no such client");
  } finally {
    kv.close();
  }
});
