/**
 * A session left idle past SESSION_IDLE_TTL is forgotten, and its GitLab token revoked by the
 * periodic sweep rather than left working in the store (and in a backup of it) until the store
 * drops the record. The idle index that finds such sessions is written with the session, only
 * when the day its expiry falls in changes: a refresh within the day writes the session alone.
 */

import assert from "node:assert/strict";
import { createApp } from "../src/app/app.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { sweepPeriodically } from "../src/app/periodic_sweep.ts";
import { silentLogger } from "../src/logger.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { denoKvBackend, type KvBackend, StoreUnavailableError } from "../src/store/backend.ts";
import type { PlannedWrite } from "../src/store/group_commit.ts";
import { recordsOf } from "../src/store/keys.ts";
import { sessionIdOf } from "../src/store/session_tokens.ts";
import type { StoreDatabase } from "../src/store/mod.ts";
import type { SessionRecord } from "../src/store/records.ts";
import {
  exchange,
  makeTestAppOn,
  poll,
  refresh,
  startFlow,
  TEST_BASE,
  type TestApp,
  withApp,
} from "./_helpers.ts";
import { STORE_KINDS } from "./_stores.ts";

const DAY_MS = 24 * 60 * 60 * 1000;
/** SESSION_IDLE_TTL's default: 30 days. */
const IDLE_TTL_MS = 30 * DAY_MS;

/** Signs in with GitLab handing out `gitlabToken`, and answers the first token response. */
async function signIn(
  t: TestApp<StoreDatabase>,
  gitlabToken: string,
): Promise<{ refresh_token: string }> {
  const flowState = await startFlow(t, { state: gitlabToken });
  t.upstream.approve({ accessToken: gitlabToken, refreshToken: `${gitlabToken}-r` });
  const done = await (await poll(t, flowState)).json();
  assert.equal(done.status, "complete", JSON.stringify(done));
  const exchanged = await exchange(t, done.code);
  assert.equal(exchanged.status, 200);
  return await exchanged.json();
}

/** One tick of the instance's periodic sweep, as its timer runs it. */
async function sweepOnce(t: Pick<TestApp<StoreDatabase>, "deps">): Promise<void> {
  const sweep = sweepPeriodically(t.deps, undefined);
  await sweep.tick();
  sweep.stop();
}

async function refreshed(t: TestApp<StoreDatabase>, refreshToken: string): Promise<string> {
  const response = await refresh(t, refreshToken);
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body.refresh_token;
}

async function assertRefused(t: TestApp<StoreDatabase>, refreshToken: string): Promise<void> {
  const response = await refresh(t, refreshToken);
  assert.equal(response.status, 400);
  assert.equal((await response.json()).error, "invalid_grant");
}

Deno.test("idle sessions: the periodic sweep revokes the GitLab token of a session idle past SESSION_IDLE_TTL; one refreshed in time is left alone", () =>
  withApp(async (t) => {
    const idle = await signIn(t, "gl-idle");
    let kept = (await signIn(t, "gl-kept")).refresh_token;

    t.clock.advance(IDLE_TTL_MS - 1000);
    kept = await refreshed(t, kept);
    t.clock.advance(2000);
    // Past its expiry the session is gone to every read, though the store keeps it for the sweep.
    await assertRefused(t, idle.refresh_token);
    assert.equal((await recordsOf(t.kv, "session")).length, 2);

    t.clock.advance(DAY_MS);
    await sweepOnce(t);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-idle"]);
    const sessions = await recordsOf<SessionRecord>(t.kv, "session");
    assert.equal(sessions.length, 1, "the idle session's record is deleted");
    assert.equal((await recordsOf(t.kv, "idle")).length, 1, "only the kept session's entry");
    await assertRefused(t, idle.refresh_token);

    await sweepOnce(t);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-idle"], "revoked once");
    await refreshed(t, kept);
  }));

Deno.test("idle sessions: a refresh within the day its expiry falls in writes the session alone; the next day moves its index entry", () =>
  withApp(async (t) => {
    let token = (await signIn(t, "gl-a")).refresh_token;
    const [entry] = await recordsOf(t.kv, "idle");
    const [session] = await recordsOf<SessionRecord>(t.kv, "session");
    assert.equal(entry.key[1], session.value.idleDay);

    t.clock.advance(60_000);
    token = await refreshed(t, token);
    const [after] = await recordsOf<SessionRecord>(t.kv, "session");
    assert.notEqual(after.versionstamp, session.versionstamp, "the session was written");
    assert.deepEqual(await recordsOf(t.kv, "idle"), [entry], "its index entry was not");

    t.clock.advance(DAY_MS);
    await refreshed(t, token);
    const moved = await recordsOf(t.kv, "idle");
    assert.equal(moved.length, 1);
    assert.equal(moved[0].key[1], Number(entry.key[1]) + 1);
  }));

Deno.test("idle sessions: a session renewed by an instance that keeps no index (a rolling upgrade) is not taken by the sweep of its old day", () =>
  withApp(async (t) => {
    let token = (await signIn(t, "gl-upgrade")).refresh_token;
    // An older instance refreshes it late in its idle life: its expiry moves, its entry does not.
    t.clock.advance(IDLE_TTL_MS - 1000);
    const [stored] = await recordsOf<SessionRecord>(t.kv, "session");
    const renewed = { ...stored.value, expiresAt: t.clock.now() + IDLE_TTL_MS };
    await t.kv.set(stored.key, renewed);

    t.clock.advance(DAY_MS + 2000);
    await sweepOnce(t);
    assert.deepEqual(t.upstream.revokedTokens, [], "a live session keeps its GitLab token");
    assert.equal((await recordsOf(t.kv, "session")).length, 1);
    assert.deepEqual(await recordsOf(t.kv, "idle"), [], "its stale entry is dropped");
    token = await refreshed(t, token);
    const [entry] = await recordsOf(t.kv, "idle");
    assert.ok(entry, "its next write indexes it again");
    const [session] = await recordsOf<SessionRecord>(t.kv, "session");
    assert.equal(entry.key[1], session.value.idleDay);
  }));

/** The indexed session made as a session stored before the index: no entry, no `idleDay`. */
async function storedAsBefore(t: TestApp): Promise<void> {
  const sessions = await recordsOf<SessionRecord>(t.kv, "session");
  const session = sessions.find((stored) => stored.value.idleDay !== undefined);
  const [entry] = await recordsOf(t.kv, "idle");
  assert.ok(session && entry);
  const { idleDay: _none, ...asBefore } = session.value;
  await t.kv.atomic().set(session.key, asBefore).delete(entry.key).commit();
}

Deno.test("idle sessions: a session stored before the index is left to the store's expiry until its next refresh indexes it", () =>
  withApp(async (t) => {
    const legacy = (await signIn(t, "gl-legacy")).refresh_token;
    await storedAsBefore(t);

    t.clock.advance(IDLE_TTL_MS + DAY_MS);
    await sweepOnce(t);
    assert.deepEqual(t.upstream.revokedTokens, [], "no entry: nothing for the sweep to find");
    await assertRefused(t, legacy);

    const later = (await signIn(t, "gl-later")).refresh_token;
    await storedAsBefore(t);
    await refreshed(t, later);
    assert.equal((await recordsOf(t.kv, "idle")).length, 1, "indexed at its refresh");
    t.clock.advance(IDLE_TTL_MS + DAY_MS);
    await sweepOnce(t);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-later"]);
  }));

Deno.test("idle sessions: signing out drops the session's index entry with it", () =>
  withApp(async (t) => {
    const { refresh_token } = await signIn(t, "gl-out");
    const revoked = await t.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: refresh_token }),
      }),
    );
    assert.equal(revoked.status, 200);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-out"]);
    assert.equal((await recordsOf(t.kv, "session")).length, 0);
    assert.equal((await recordsOf(t.kv, "idle")).length, 0);
  }));

for (const kind of STORE_KINDS) {
  Deno.test({
    name:
      `idle sessions [${kind.name}]: two instances sweeping the same store revoke each token once`,
    ignore: kind.ignore,
    async fn() {
      const store = await kind.create();
      const { database, close } = await store.open();
      // The other instance has connections of its own, as another process would.
      const second = await store.open();
      const t = await makeTestAppOn(database);
      try {
        const other = createAppDeps(t.config, {
          kv: second.database,
          clock: t.clock,
          logger: silentLogger,
          templates: await loadTemplates(),
          upstream: t.upstream,
        });
        const instances = [t, { deps: other, app: createApp(other) }];
        const tokens = ["gl-1", "gl-2", "gl-3"];
        for (const token of tokens) await signIn(t, token);

        t.clock.advance(IDLE_TTL_MS + DAY_MS);
        await Promise.all(
          instances.flatMap((instance) => Array.from({ length: 4 }, () => sweepOnce(instance))),
        );
        assert.deepEqual(t.upstream.revokedTokens.sort(), tokens);
        assert.equal((await recordsOf(database, "session")).length, 0);
        assert.equal((await recordsOf(database, "idle")).length, 0);
      } finally {
        t.close();
        await second.close();
        await close();
        await store.dispose();
      }
    },
  });
}

/**
 * A database whose commits deleting the session `failing.id` names fail as a storage failure
 * does (503), while every other commit goes through.
 */
function failingSessionDeletes(
  kv: Deno.Kv,
  failing: { id?: string },
): KvBackend {
  const backend = denoKvBackend(kv);
  const deletesFailing = (write: PlannedWrite) =>
    write.mutations.some((mutation) =>
      mutation.type === "delete" && mutation.key[0] === "session" &&
      mutation.key[1] === failing.id
    );
  return {
    ...backend,
    commit(write) {
      if (deletesFailing(write)) {
        return Promise.reject(new StoreUnavailableError("KV storage unavailable: disk I/O error"));
      }
      return backend.commit(write);
    },
  };
}

Deno.test("idle sessions: a sweep whose take of one session fails still revokes the GitLab tokens of those it deleted", async () => {
  const kv = await Deno.openKv(":memory:");
  const failing: { id?: string } = {};
  const t = await makeTestAppOn(failingSessionDeletes(kv, failing));
  try {
    const tokens = ["gl-1", "gl-2", "gl-3"];
    const signedIn = [];
    for (const token of tokens) signedIn.push(await signIn(t, token));
    failing.id = sessionIdOf(signedIn[1].refresh_token) ?? undefined;

    t.clock.advance(IDLE_TTL_MS + DAY_MS);
    await sweepOnce(t);
    // The two sessions deleted have had their GitLab tokens revoked: their index entries are
    // gone, so no later sweep would find them again.
    assert.deepEqual(t.upstream.revokedTokens.sort(), ["gl-1", "gl-3"]);
    assert.equal((await recordsOf(kv, "session")).length, 1, "the one not taken is kept");
    assert.equal((await recordsOf(kv, "idle")).length, 1, "with its entry, for the next sweep");

    failing.id = undefined;
    await sweepOnce(t);
    assert.deepEqual(t.upstream.revokedTokens.sort(), tokens);
    assert.equal((await recordsOf(kv, "session")).length, 0);
  } finally {
    t.close();
    kv.close();
  }
});
