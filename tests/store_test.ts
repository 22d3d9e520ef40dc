import assert from "node:assert/strict";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import { sha256Base64Url } from "../src/crypto.ts";
import { type RecordKind, recordsOf, sessionKey } from "../src/store/keys.ts";
import type { CodeRecord, FlowRecord, SessionRecord } from "../src/store/records.ts";
import { newSessionToken } from "../src/store/session_tokens.ts";
import { idleDayOf } from "../src/store/idle_sessions.ts";
import { createSecretBox, type SecretBox } from "../src/secret_box.ts";
import { createStore, type Store } from "../src/store/mod.ts";
import {
  exchange,
  FakeClock,
  issueTokens,
  kvText,
  makeTestApp,
  PKCE,
  poll,
  refresh,
  startFlow,
  TEST_REDIRECT as REDIRECT,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";

const MINUTE = 60_000;

function flowRecord(clock: FakeClock, overrides: Partial<FlowRecord> = {}): FlowRecord {
  return {
    deviceCode: "device-code-1",
    userCode: "WDJB-MJHT",
    verificationUri: "https://gitlab.test/oauth/device",
    expiresAt: clock.now() + 5 * MINUTE,
    intervalSeconds: 5,
    clientId: "client-1",
    codeChallenge: PKCE.challenge,
    codeChallengeMethod: "S256",
    state: "xyz",
    redirectUri: REDIRECT,
    ...overrides,
  };
}

/** GitLab tokens sealed the way every store in this file opens them. */
const SEALED_GITLAB_TOKENS = await createSecretBox([TEST_SECRET]).seal(
  JSON.stringify({ accessToken: "gl-access-0", refreshToken: "gl-refresh-0" }),
);

function sessionRecord(clock: FakeClock, overrides: Partial<SessionRecord> = {}): SessionRecord {
  const now = clock.now();
  return {
    id: crypto.randomUUID(),
    mcpRefreshTokenHash: "",
    mcpTokenExpiry: 0,
    sealedUpstreamTokens: SEALED_GITLAB_TOKENS,
    upstreamTokenExpiry: now + 7200_000,
    upstreamUserId: "4242",
    upstreamUsername: "ada",
    clientId: "client-1",
    scopes: ["mcp:tools", "mcp:resources"],
    createdAt: now,
    updatedAt: now,
    expiresAt: now + 30 * 24 * 60 * MINUTE,
    ...overrides,
  };
}

function codeRecord(clock: FakeClock, sessionId: string): CodeRecord {
  return {
    sessionId,
    clientId: "client-1",
    codeChallenge: PKCE.challenge,
    codeChallengeMethod: "S256",
    redirectUri: REDIRECT,
    expiresAt: clock.now() + 10 * MINUTE,
  };
}

/** The refresh token hash each stored session holds. */
async function sessionHashes(kv: Deno.Kv): Promise<string[]> {
  const sessions = await recordsOf(kv, "session");
  return sessions.map((entry) => (entry.value as SessionRecord).mcpRefreshTokenHash);
}

async function keysUnder(kv: Deno.Kv, kind: RecordKind): Promise<Deno.KvKey[]> {
  return (await recordsOf(kv, kind)).map((entry) => entry.key);
}

/** Runs `fn` with a store over a fresh in-memory KV, closed afterwards. */
async function withStore(
  fn: (store: Store, kv: Deno.Kv, clock: FakeClock) => Promise<void>,
): Promise<void> {
  const kv = await Deno.openKv(":memory:");
  try {
    const clock = new FakeClock();
    await fn(createStore(kv, clock, createSecretBox([TEST_SECRET])), kv, clock);
  } finally {
    kv.close();
  }
}

/** A flow completed into a code and a session, as the poll does it. */
async function completedFlow(store: Store, clock: FakeClock, code = "the-code") {
  await store.createFlow("flow-state", flowRecord(clock));
  const flow = (await store.getFlow("flow-state"))!;
  const session = sessionRecord(clock);
  assert.equal(
    await store.completeFlow(flow, { code, codeRecord: codeRecord(clock, session.id), session }),
    true,
  );
  return { code, session };
}

/** A session and the refresh token it holds, as a code exchange leaves them. */
async function redeemedSession(store: Store, clock: FakeClock) {
  const { code, session } = await completedFlow(store, clock);
  const codeEntry = (await store.getCode(code))!;
  const sessionEntry = (await store.getSession(session.id))!;
  const token = newSessionToken(session.id);
  const updated = { ...session, mcpRefreshTokenHash: sha256Base64Url(token) };
  assert.equal(await store.redeemCode(codeEntry, sessionEntry, updated), true);
  return { session: (await store.getSession(session.id))!, token };
}

/** The session with a new refresh token for it, as a rotation writes it. */
function withNewToken(session: SessionRecord): { updated: SessionRecord; token: string } {
  const token = newSessionToken(session.id);
  return { updated: { ...session, mcpRefreshTokenHash: sha256Base64Url(token) }, token };
}

Deno.test("store: device flows", async (t) => {
  await withStore(async (store, kv, clock) => {
    await t.step("createFlow stores the record under the flow state's hash", async () => {
      const flow = flowRecord(clock);
      await store.createFlow("state-a", flow);
      // Spelled out rather than flowKey(): the key must hold the hash, never the state.
      assert.deepEqual(await keysUnder(kv, "flow"), [["flow", sha256Base64Url("state-a")]]);
      const read = await store.getFlow("state-a");
      assert.ok(read);
      assert.deepEqual(read.value, flow);
      assert.equal(typeof read.versionstamp, "string");
    });
    await t.step("createFlow refuses a flow state already in use", async () => {
      await assert.rejects(store.createFlow("state-a", flowRecord(clock)));
    });
    await t.step("getFlow of an unknown flow state is null", async () => {
      assert.equal(await store.getFlow("state-unknown"), null);
    });
    await t.step(
      "getFlow returns a flow past its expiresAt (the poll answers expired)",
      async () => {
        clock.advance(6 * MINUTE);
        const read = await store.getFlow("state-a");
        assert.ok(read);
        assert.ok(clock.now() > read.value.expiresAt);
      },
    );
    await t.step("saveFlowUpstreamTokens keeps the tokens; a stale read fails", async () => {
      await store.createFlow("state-b", flowRecord(clock));
      const before = (await store.getFlow("state-b"))!;
      const tokens = { accessToken: "a", refreshToken: "r", expiresAt: clock.now() + 1000 };
      const saved = await store.saveFlowUpstreamTokens(before, tokens);
      assert.ok(saved);
      assert.deepEqual(saved.value.upstreamTokens, tokens);
      assert.notEqual(saved.versionstamp, before.versionstamp);
      assert.deepEqual((await store.getFlow("state-b"))!.value.upstreamTokens, tokens);
      assert.equal(await store.saveFlowUpstreamTokens(before, tokens), null);
    });
    await t.step("deleteFlow deletes an unchanged flow; a stale read fails", async () => {
      const stale = (await store.getFlow("state-a"))!;
      await store.saveFlowUpstreamTokens(stale, {
        accessToken: "a",
        refreshToken: "",
        expiresAt: 0,
      });
      assert.equal(await store.deleteFlow(stale), false);
      assert.ok(await store.getFlow("state-a"));
      assert.equal(await store.deleteFlow((await store.getFlow("state-a"))!), true);
      assert.equal(await store.getFlow("state-a"), null);
    });
  });
});

Deno.test("store: completeFlow", async (t) => {
  await withStore(async (store, kv, clock) => {
    await t.step("stores code and session and deletes the flow in one commit", async () => {
      const { code, session } = await completedFlow(store, clock, "code-1");
      assert.equal(await store.getFlow("flow-state"), null);
      const read = await store.getCode(code);
      assert.ok(read);
      assert.deepEqual(read.value, codeRecord(clock, session.id));
      assert.deepEqual((await store.getSession(session.id))!.value, session);
      assert.deepEqual(await keysUnder(kv, "code"), [["code", sha256Base64Url(code)]]);
      assert.deepEqual(await keysUnder(kv, "session"), [sessionKey(session.id)]);
    });
    await t.step("fails and writes nothing when the flow changed since read", async () => {
      await store.createFlow("flow-2", flowRecord(clock));
      const stale = (await store.getFlow("flow-2"))!;
      await store.saveFlowUpstreamTokens(stale, {
        accessToken: "a",
        refreshToken: "",
        expiresAt: 0,
      });
      const before = await recordsOf(kv);
      const session = sessionRecord(clock);
      const done = await store.completeFlow(stale, {
        code: "code-2",
        codeRecord: codeRecord(clock, session.id),
        session,
      });
      assert.equal(done, false);
      assert.deepEqual(await recordsOf(kv), before);
      assert.equal(await store.getCode("code-2"), null);
      assert.equal(await store.getSession(session.id), null);
      assert.ok(await store.getFlow("flow-2"));
    });
    await t.step("fails and writes nothing when the flow is already gone", async () => {
      const flow = (await store.getFlow("flow-2"))!;
      assert.equal(await store.deleteFlow(flow), true);
      const before = await recordsOf(kv);
      const session = sessionRecord(clock);
      const done = await store.completeFlow(flow, {
        code: "code-3",
        codeRecord: codeRecord(clock, session.id),
        session,
      });
      assert.equal(done, false);
      assert.deepEqual(await recordsOf(kv), before);
    });
  });
});

Deno.test("store: authorization codes", async (t) => {
  await withStore(async (store, kv, clock) => {
    const { code, session } = await completedFlow(store, clock);

    await t.step("getCode of an unknown code is null", async () => {
      assert.equal(await store.getCode("no-such-code"), null);
    });
    await t.step(
      "getCode returns a code past its expiresAt (the route answers expired)",
      async () => {
        clock.advance(11 * MINUTE);
        const read = await store.getCode(code);
        assert.ok(read);
        assert.ok(clock.now() > read.value.expiresAt);
        clock.advance(-11 * MINUTE);
      },
    );
    await t.step(
      "redeemCode consumes the code and gives the session its refresh token",
      async () => {
        const codeEntry = (await store.getCode(code))!;
        const sessionEntry = (await store.getSession(session.id))!;
        const { updated: rotated, token } = withNewToken(session);
        const updated = { ...rotated, mcpTokenExpiry: clock.now() + 3600_000 };
        assert.equal(await store.redeemCode(codeEntry, sessionEntry, updated), true);
        assert.equal(await store.getCode(code), null);
        // Redeemed, it is indexed under the day it expires in, for the idle sweep.
        const idleDay = idleDayOf(updated.expiresAt);
        assert.deepEqual((await store.getSession(session.id))!.value, { ...updated, idleDay });
        assert.deepEqual(await keysUnder(kv, "session"), [sessionKey(session.id)]);
        assert.deepEqual(await keysUnder(kv, "idle"), [["idle", idleDay, session.id]]);
        assert.equal((await findSessionByRefreshToken(store, token))!.value.id, session.id);
        // The same read cannot redeem twice.
        assert.equal(await store.redeemCode(codeEntry, sessionEntry, updated), false);
        assert.equal(await findSessionByRefreshToken(store, newSessionToken(session.id)), null);
      },
    );
    await t.step("deleteCode deletes an unchanged code; a stale read fails", async () => {
      const other = await completedFlow(store, clock, "code-to-delete");
      const read = (await store.getCode(other.code))!;
      assert.equal(await store.deleteCode(read), true);
      assert.equal(await store.getCode(other.code), null);
      assert.equal(await store.deleteCode(read), false);
    });
  });
});

Deno.test("store: sessions and refresh tokens", async (t) => {
  await withStore(async (store, kv, clock) => {
    await t.step("getSession returns a live session and null for an unknown id", async () => {
      const session = sessionRecord(clock);
      const { code } = await completedFlow(store, clock, "code-s");
      assert.equal(await store.getSession(session.id), null);
      const id = (await store.getCode(code))!.value.sessionId;
      assert.equal((await store.getSession(id))!.value.id, id);
    });
    await t.step("getSession returns null past the session's expiresAt", async () => {
      const { session: live, token } = await redeemedSession(store, clock);
      clock.current = live.value.expiresAt;
      assert.ok(await store.getSession(live.value.id), "still live at expiresAt");
      assert.ok(await findSessionByRefreshToken(store, token));
      clock.advance(1);
      assert.equal(await store.getSession(live.value.id), null);
      assert.equal(await findSessionByRefreshToken(store, token), null);
      clock.current = new FakeClock().current;
    });
    const tokens: Record<string, string> = {};
    await t.step("a refresh token finds the live session that holds its hash", async () => {
      const { session, token } = await redeemedSession(store, clock);
      tokens.a = token;
      assert.equal(session.value.mcpRefreshTokenHash, sha256Base64Url(token));
      assert.equal((await findSessionByRefreshToken(store, token))!.value.id, session.value.id);
      // Naming another session, another token of this session, or a tampered random part:
      // nothing.
      const other = await redeemedSession(store, clock);
      assert.equal(
        await findSessionByRefreshToken(
          store,
          token.replace(session.value.id, other.session.value.id),
        ),
        null,
      );
      assert.equal(await findSessionByRefreshToken(store, newSessionToken(session.value.id)), null);
      assert.equal(await findSessionByRefreshToken(store, `x${token}`), null);
      assert.equal(await findSessionByRefreshToken(store, "refresh-unknown"), null);
    });
    await t.step("rotateRefreshToken replaces the token in the session", async () => {
      const session = (await findSessionByRefreshToken(store, tokens.a))!;
      const { updated, token } = withNewToken(session.value);
      tokens.b = token;
      assert.equal(await store.rotateRefreshToken(session, updated), true);
      assert.deepEqual((await kv.get(sessionKey(session.value.id))).value, updated);
      assert.equal(await findSessionByRefreshToken(store, tokens.a), null);
      assert.equal((await findSessionByRefreshToken(store, tokens.b))!.value.id, session.value.id);
    });
    await t.step("rotateRefreshToken fails and writes nothing on a stale session", async () => {
      const current = (await findSessionByRefreshToken(store, tokens.b))!;
      const next = withNewToken(current.value);
      tokens.c = next.token;
      assert.equal(await store.rotateRefreshToken(current, next.updated), true);
      const before = await recordsOf(kv);
      const lost = withNewToken(current.value);
      assert.equal(await store.rotateRefreshToken(current, lost.updated), false);
      assert.deepEqual(await recordsOf(kv), before);
      assert.equal(await findSessionByRefreshToken(store, tokens.b), null);
      assert.equal(await findSessionByRefreshToken(store, lost.token), null);
      assert.ok(await findSessionByRefreshToken(store, tokens.c));
    });
    await t.step("saveSession stores the update; a stale read fails", async () => {
      const read = (await findSessionByRefreshToken(store, tokens.c))!;
      const sealedUpstreamTokens = await store.sealUpstreamTokens({
        accessToken: "gl-access-9",
        refreshToken: "gl-refresh-9",
      });
      const updated = { ...read.value, sealedUpstreamTokens };
      const saved = await store.saveSession(read, updated);
      assert.ok(saved);
      assert.deepEqual(saved.value, updated);
      assert.deepEqual((await store.getSession(read.value.id))!.value, updated);
      assert.equal(await store.saveSession(read, { ...updated, upstreamTokenExpiry: 1 }), null);
      // The refresh token still works after saveSession.
      assert.equal((await findSessionByRefreshToken(store, tokens.c))!.value.id, read.value.id);
    });
    await t.step("deleteSession removes the session, and its refresh token with it", async () => {
      const read = (await findSessionByRefreshToken(store, tokens.c))!;
      await store.deleteSession(read.value.id);
      assert.equal(await store.getSession(read.value.id), null);
      assert.equal((await kv.get(sessionKey(read.value.id))).versionstamp, null);
      assert.equal(await findSessionByRefreshToken(store, tokens.c), null);
    });
    await t.step(
      "a rotation that read the session before its deletion writes nothing",
      async () => {
        const { session } = await redeemedSession(store, clock);
        await store.deleteSession(session.value.id);
        const { updated, token } = withNewToken(session.value);
        assert.equal(await store.rotateRefreshToken(session, updated), false);
        assert.equal((await kv.get(sessionKey(session.value.id))).versionstamp, null);
        assert.equal(await findSessionByRefreshToken(store, token), null);
      },
    );
    await t.step("deleteSession of an unknown id does nothing", async () => {
      const before = await recordsOf(kv);
      await store.deleteSession("no-such-session");
      assert.deepEqual(await recordsOf(kv), before);
    });
  });
});

Deno.test("store: leases", async (t) => {
  await withStore(async (store, kv, clock) => {
    await t.step("tryLease excludes a second holder until released", async () => {
      const lease = await store.tryLease("work", "a", 10_000);
      assert.ok(lease);
      assert.equal(await store.tryLease("work", "a", 10_000), null);
      const other = await store.tryLease("work", "b", 10_000);
      assert.ok(other, "another id is independent");
      await other.release();
      await lease.release();
      const again = await store.tryLease("work", "a", 10_000);
      assert.ok(again);
      await again.release();
    });
    await t.step("tryLease excludes until the clock passes its expiry", async () => {
      const lease = await store.tryLease("work", "c", 10_000);
      assert.ok(lease);
      clock.advance(10_000);
      assert.equal(await store.tryLease("work", "c", 10_000), null, "held at its expiry");
      clock.advance(1);
      const taken = await store.tryLease("work", "c", 10_000);
      assert.ok(taken, "free once the clock is past its expiry");
      // The first holder's late release leaves the new holder's lease alone.
      await lease.release();
      assert.equal(await store.tryLease("work", "c", 10_000), null);
      await taken.release();
      assert.deepEqual(await keysUnder(kv, "lease"), []);
    });
    await t.step("parallel tryLease: exactly one holder", async () => {
      for (let round = 0; round < 5; round++) {
        const leases = await Promise.all(
          Array.from({ length: 10 }, () => store.tryLease("work", `race-${round}`, 10_000)),
        );
        const held = leases.filter((lease) => lease !== null);
        assert.equal(held.length, 1);
        await held[0]!.release();
      }
    });
    await t.step("tryLeaseFlow excludes per flow", async () => {
      await store.createFlow("flow-x", flowRecord(clock));
      await store.createFlow("flow-y", flowRecord(clock));
      const x = (await store.getFlow("flow-x"))!;
      const lease = await store.tryLeaseFlow(x, 10_000);
      assert.ok(lease);
      assert.equal(await store.tryLeaseFlow(x, 10_000), null);
      const y = await store.tryLeaseFlow((await store.getFlow("flow-y"))!, 10_000);
      assert.ok(y);
      await y.release();
      await lease.release();
      const again = await store.tryLeaseFlow(x, 10_000);
      assert.ok(again);
      await again.release();
    });
  });
});

function assertNoneContain(text: string, secrets: Record<string, string>): void {
  for (const [name, secret] of Object.entries(secrets)) {
    assert.ok(!text.includes(secret), `${name} found in KV: ${text}`);
  }
}

Deno.test("store: secrets appear in KV only as SHA-256 hashes", async (t) => {
  let app: TestApp | undefined;
  try {
    app = await makeTestApp();
    const a = app;
    const secrets: Record<string, string> = {};

    await t.step("a stored flow is keyed by the flow state's hash", async () => {
      secrets.flowState = await startFlow(a);
      // Keys spelled out rather than built: they must hold hashes, never the secrets.
      assert.deepEqual(await keysUnder(a.kv, "flow"), [
        ["flow", sha256Base64Url(secrets.flowState)],
      ]);
      assertNoneContain(await kvText(a.kv), secrets);
    });
    await t.step("a stored code is keyed by the code's hash", async () => {
      a.upstream.approve();
      const body = await (await poll(a, secrets.flowState)).json();
      assert.equal(body.status, "complete");
      secrets.code = body.code;
      assert.deepEqual(await keysUnder(a.kv, "code"), [["code", sha256Base64Url(body.code)]]);
      assert.deepEqual(await keysUnder(a.kv, "flow"), []);
      assertNoneContain(await kvText(a.kv), secrets);
    });
    await t.step("a refresh token is kept as its hash, in its session", async () => {
      const response = await exchange(a, secrets.code);
      assert.equal(response.status, 200);
      const body = await response.json();
      secrets.refresh1 = body.refresh_token;
      secrets.access1 = body.access_token;
      assert.deepEqual(await sessionHashes(a.kv), [sha256Base64Url(body.refresh_token)]);
      assert.deepEqual(await keysUnder(a.kv, "code"), []);
      assertNoneContain(await kvText(a.kv), secrets);
    });
    await t.step("after a refresh only the new token's hash is kept", async () => {
      const response = await refresh(a, secrets.refresh1);
      assert.equal(response.status, 200);
      const body = await response.json();
      secrets.refresh2 = body.refresh_token;
      secrets.access2 = body.access_token;
      assert.deepEqual(await sessionHashes(a.kv), [sha256Base64Url(body.refresh_token)]);
      assertNoneContain(await kvText(a.kv), secrets);
    });
    await t.step(
      "with issueTokens and a refresh, each session holds only its newest token's hash",
      async () => {
        const issued = await issueTokens(a);
        const refreshed = await refresh(a, issued.refresh_token);
        assert.equal(refreshed.status, 200);
        const body = await refreshed.json();
        Object.assign(secrets, {
          refresh3: issued.refresh_token,
          access3: issued.access_token,
          refresh4: body.refresh_token,
          access4: body.access_token,
        });
        assertNoneContain(await kvText(a.kv), secrets);

        const hashes = [
          sha256Base64Url(secrets.refresh2),
          sha256Base64Url(secrets.refresh4),
        ];
        assert.deepEqual((await sessionHashes(a.kv)).sort(), hashes.sort());
        for (const current of [secrets.refresh2, secrets.refresh4]) {
          assert.ok(await findSessionByRefreshToken(a.store, current));
        }
        for (const old of [secrets.refresh1, secrets.refresh3]) {
          assert.equal(await findSessionByRefreshToken(a.store, old), null);
        }
      },
    );
  } finally {
    app?.close();
  }
});

Deno.test("store: a grant that does not touch GitLab never opens the GitLab tokens", async () => {
  const box = createSecretBox([TEST_SECRET]);
  let opened = 0;
  const counting: SecretBox = {
    ...box,
    open(sealed) {
      opened++;
      return box.open(sealed);
    },
  };
  const kv = await Deno.openKv(":memory:");
  try {
    const clock = new FakeClock();
    const store = createStore(kv, clock, counting);
    const { token } = await redeemedSession(store, clock);
    opened = 0;
    const found = (await findSessionByRefreshToken(store, token))!;
    const { updated } = withNewToken(found.value);
    assert.equal(await store.rotateRefreshToken(found, updated), true);
    assert.equal(opened, 0, "read and rotated with the GitLab tokens sealed");
    assert.deepEqual(await store.openUpstreamTokens(updated), {
      accessToken: "gl-access-0",
      refreshToken: "gl-refresh-0",
    });
    assert.equal(opened, 1);
  } finally {
    kv.close();
  }
});

Deno.test("store: getCodeAndSession finds the code and its session, by name or by record", async (t) => {
  await withStore(async (store, _kv, clock) => {
    await t.step("a code naming its session", async () => {
      await store.createFlow("flow-named", flowRecord(clock));
      const flow = (await store.getFlow("flow-named"))!;
      const session = sessionRecord(clock);
      const code = newSessionToken(session.id);
      const codeRecordValue = codeRecord(clock, session.id);
      assert.ok(await store.completeFlow(flow, { code, codeRecord: codeRecordValue, session }));
      const found = (await store.getCodeAndSession(code))!;
      assert.deepEqual(found.code.value, codeRecordValue);
      assert.equal(found.session?.value.id, session.id);
    });
    await t.step("a code of another shape (issued before codes named sessions)", async () => {
      const { code, session } = await completedFlow(store, clock, "plain-code");
      const found = (await store.getCodeAndSession(code))!;
      assert.equal(found.code.value.sessionId, session.id);
      assert.equal(found.session?.value.id, session.id);
    });
    await t.step("a code whose name points at another session trusts the record", async () => {
      const { session } = await completedFlow(store, clock, "unused");
      const forged = newSessionToken(crypto.randomUUID());
      assert.equal(await store.getCodeAndSession(forged), null);
      const other = await completedFlow(store, clock, `x.${session.id}`);
      const found = (await store.getCodeAndSession(`x.${session.id}`))!;
      assert.equal(found.session?.value.id, other.session.id);
    });
    await t.step("a code whose session is gone comes back without it", async () => {
      const { code, session } = await completedFlow(store, clock, "orphan-code");
      await store.deleteSession(session.id);
      const found = (await store.getCodeAndSession(code))!;
      assert.equal(found.session, null);
      assert.equal(await store.getCodeAndSession("unknown-code"), null);
    });
  });
});
