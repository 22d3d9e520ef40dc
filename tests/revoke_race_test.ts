/**
 * Revocation wins: `/revoke` deletes a session only as it read it and reads it again when a
 * refresh or a GitLab renewal saved it in between, and a client refreshing without pause (or a
 * thief with a stolen refresh token, racing the user's /revoke) made every one of those attempts
 * lose: /revoke answered 200 (RFC 7009 answers 200 anyway) and the session lived on (found by
 * review). The last attempt now ends it whatever it has become, with GitLab renewals held off,
 * so the GitLab token revoked is still the one the session held last.
 */

import assert from "node:assert/strict";
import { RENEWAL_LEASE } from "../src/session/renewal_lease.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import { denoKvBackend, type KvBackend, StoreUnavailableError } from "../src/store/backend.ts";
import type { PlannedWrite } from "../src/store/group_commit.ts";
import type { StoreDatabase } from "../src/store/mod.ts";
import { sessionIdOf } from "../src/store/session_tokens.ts";
import { echo, mcpRequest, startScripted } from "./_gateway.ts";
import {
  issueTokens,
  makeTestApp,
  makeTestAppOn,
  refresh,
  TEST_BASE,
  type TestApp,
} from "./_helpers.ts";

const MINUTE = 60_000;

function revoke(t: TestApp<StoreDatabase>, token: string): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/revoke`, { method: "POST", body: new URLSearchParams({ token }) }),
  );
}

/** What the racing holder of the refresh token got from its refreshes, newest last. */
interface Racer {
  refreshToken: string;
  accessTokens: string[];
  refreshes: number;
}

/**
 * The holder of `racer`'s refresh token refreshes it over HTTP just before each of the store's
 * checked deletes of a session, so every one of them finds the session changed.
 */
function refreshBeforeEveryCheckedDelete(t: TestApp<StoreDatabase>, racer: Racer): void {
  const checkedDelete = t.store.deleteSessionIfUnchanged.bind(t.store);
  t.store.deleteSessionIfUnchanged = async (session) => {
    const response = await refresh(t, racer.refreshToken);
    assert.equal(response.status, 200, "the racing refresh is served");
    const body = await response.json();
    racer.refreshToken = body.refresh_token;
    racer.accessTokens.push(body.access_token);
    racer.refreshes++;
    return await checkedDelete(session);
  };
}

Deno.test("revoke race: a session refreshed before every attempt to end it is ended all the same, its last GitLab token revoked", async () => {
  const mcp = startScripted(echo);
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: mcp.url } });
  try {
    const { access_token, refresh_token } = await issueTokens(t);
    const sessionId = sessionIdOf(refresh_token) ?? "";
    const session = await t.store.getSession(sessionId);
    assert.ok(session);
    // GitLab's token is about to expire: the first racing refresh renews it.
    t.clock.current = session.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + MINUTE;
    t.upstream.refreshes.push({
      accessToken: "gl-access-renewed",
      refreshToken: "gl-refresh-renewed",
      expiresInSeconds: 7200,
    });
    const racer: Racer = { refreshToken: refresh_token, accessTokens: [], refreshes: 0 };
    refreshBeforeEveryCheckedDelete(t, racer);

    const revoked = await revoke(t, refresh_token);

    assert.equal(revoked.status, 200);
    await revoked.body?.cancel();
    assert.ok(racer.refreshes >= 4, `every checked delete lost: ${racer.refreshes} refreshes`);
    assert.equal(t.upstream.calls.refresh, 1, "GitLab renewed the token during the race");
    assert.equal(await t.store.getSession(sessionId), null, "the session is ended");
    const refused = await refresh(t, racer.refreshToken);
    assert.equal(refused.status, 400);
    assert.equal((await refused.json()).error, "invalid_grant");
    for (const accessToken of [access_token, ...racer.accessTokens]) {
      const call = await mcpRequest(t, accessToken, { body: "{}" });
      assert.equal(call.status, 401, "no access token of the session is accepted");
      await call.body?.cancel();
    }
    assert.equal(mcp.requests.length, 0);
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-renewed"], "the token it held last");
  } finally {
    t.close();
    await mcp.close();
  }
});

Deno.test("revoke race: a GitLab renewal in flight at the last attempt is waited for, and its new token revoked", async () => {
  const t = await makeTestApp();
  try {
    const { refresh_token } = await issueTokens(t);
    const sessionId = sessionIdOf(refresh_token) ?? "";
    const session = await t.store.getSession(sessionId);
    assert.ok(session);
    const renewalDueAt = session.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + MINUTE;
    // GitLab answers the renewal only once /revoke's last attempt has begun.
    const renewing = Promise.withResolvers<void>();
    const answer = Promise.withResolvers<void>();
    const saved = Promise.withResolvers<void>();
    t.upstream.refreshes.push(async () => {
      renewing.resolve();
      await answer.promise;
      return {
        accessToken: "gl-access-renewed",
        refreshToken: "gl-refresh-renewed",
        expiresInSeconds: 7200,
      };
    });
    const racer: Racer = { refreshToken: refresh_token, accessTokens: [], refreshes: 0 };
    refreshBeforeEveryCheckedDelete(t, racer);
    let inFlight: Promise<Response> | undefined;
    const racedDelete = t.store.deleteSessionIfUnchanged.bind(t.store);
    t.store.deleteSessionIfUnchanged = async (read) => {
      if (racer.refreshes < 3) return await racedDelete(read);
      // The last checked delete: a refresh, and then another one that renews GitLab's token,
      // in flight.
      const lost = await racedDelete(read);
      t.clock.current = renewalDueAt;
      inFlight = refresh(t, racer.refreshToken);
      await renewing.promise;
      return lost;
    };
    const { tryLease, saveSession, deleteSession } = t.store;
    t.store.tryLease = (kind, id, ttlMs) => {
      if (inFlight) answer.resolve();
      return tryLease.call(t.store, kind, id, ttlMs);
    };
    t.store.saveSession = async (read, updated) => {
      const result = await saveSession.call(t.store, read, updated);
      saved.resolve();
      return result;
    };
    t.store.deleteSession = async (id) => {
      // An ending that did not wait for the renewal deletes what the renewal saved after its read.
      answer.resolve();
      await saved.promise;
      return await deleteSession.call(t.store, id);
    };

    const revoked = await revoke(t, refresh_token);

    assert.equal(revoked.status, 200);
    await revoked.body?.cancel();
    await (await inFlight)?.body?.cancel();
    assert.equal(t.upstream.calls.refresh, 1);
    assert.equal(await t.store.getSession(sessionId), null, "the session is ended");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-renewed"], "no GitLab token left live");
  } finally {
    t.close();
  }
});

/** A database whose commits releasing a renewal lease fail as a storage failure does (503). */
function failingLeaseReleases(kv: Deno.Kv): KvBackend {
  const backend = denoKvBackend(kv);
  const releasesLease = (write: PlannedWrite) =>
    write.mutations.some((mutation) =>
      mutation.type === "delete" && mutation.key[0] === "lease" &&
      mutation.key[1] === RENEWAL_LEASE
    );
  return {
    ...backend,
    commit(write) {
      if (releasesLease(write)) {
        return Promise.reject(new StoreUnavailableError("KV storage unavailable: disk I/O error"));
      }
      return backend.commit(write);
    },
  };
}

Deno.test("revoke race: a renewal lease the last attempt cannot release leaves the session ended and its GitLab token revoked, not a 503", async () => {
  const kv = await Deno.openKv(":memory:");
  const t = await makeTestAppOn(failingLeaseReleases(kv));
  try {
    const { refresh_token } = await issueTokens(t);
    const sessionId = sessionIdOf(refresh_token) ?? "";
    const session = await t.store.getSession(sessionId);
    assert.ok(session);
    const gitlab = await t.store.openUpstreamTokens(session.value);
    const racer: Racer = { refreshToken: refresh_token, accessTokens: [], refreshes: 0 };
    refreshBeforeEveryCheckedDelete(t, racer);

    const revoked = await revoke(t, refresh_token);

    assert.equal(revoked.status, 200, await revoked.clone().text());
    await revoked.body?.cancel();
    assert.equal(await t.store.getSession(sessionId), null, "the session is ended");
    // The lease expires on its own; the session deleted must not keep its GitLab token.
    assert.deepEqual(
      t.upstream.revokedTokens,
      [gitlab?.accessToken],
      "its GitLab token is revoked",
    );
  } finally {
    t.close();
    kv.close();
  }
});
