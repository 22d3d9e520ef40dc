/**
 * The store's operator methods (what `deno task admin` runs on) over the real app: sessions
 * found by GitLab username in any case or by id, expired ones left out, deletes that end the
 * refresh token, clients deleted once, counts.
 */

import assert from "node:assert/strict";
import { issueTokens, refresh, withApp } from "./_helpers.ts";

Deno.test("operator store: sessions by user, expiry, deletes and counts", () =>
  withApp(async (t) => {
    t.upstream.user = { id: 1, username: "early" };
    await issueTokens(t);
    t.clock.advance(t.config.sessionIdleTtlSeconds * 1000 - 60_000);
    t.upstream.user = { id: 4242, username: "Ada" };
    const ada = [await issueTokens(t), await issueTokens(t)];
    t.clock.advance(1000);
    t.upstream.user = { id: 77, username: "grace" };
    const grace = await issueTokens(t);
    t.clock.advance(120_000);

    assert.deepEqual((await t.store.listSessions()).map((s) => s.value.upstreamUsername), [
      "Ada",
      "Ada",
      "grace",
    ], "oldest first, and the session past its idle lifetime is not listed");
    assert.equal((await t.store.listSessions({ user: "ada" })).length, 2, "any case");
    assert.equal((await t.store.listSessions({ user: "4242" })).length, 2, "by id");
    assert.equal((await t.store.listSessions({ user: "4" })).length, 0, "no prefix match");
    assert.equal((await t.store.listSessions({ user: "77" }))[0].value.upstreamUsername, "grace");
    assert.equal((await t.store.listSessions({ clientId: "nobody" })).length, 0);
    assert.equal((await t.store.countRecords()).sessions, 4, "counts what KV still holds");
    assert.equal(await t.store.countLiveSessions(), 3, "the expired session is not live");

    const ended = await t.store.listSessions({ user: "ADA" });
    assert.equal(ended.length, 2);
    for (const session of ended) assert.ok(await t.store.deleteSessionIfUnchanged(session));
    for (const tokens of ada) {
      const response = await refresh(t, tokens.refresh_token);
      assert.equal((await response.json()).error, "invalid_grant");
    }
    assert.equal((await refresh(t, grace.refresh_token)).status, 200);
    assert.equal((await t.store.listSessions()).length, 1);
    assert.equal(await t.store.countLiveSessions(), 1);
  }));

Deno.test("operator store: clients listed oldest first, deleted once", () =>
  withApp(async (t) => {
    for (const [clientId, issuedAt] of [["b", 2], ["a", 1]] as const) {
      await t.store.registerClient({
        clientId,
        clientIdIssuedAt: issuedAt,
        redirectUris: ["http://127.0.0.1/cb"],
        metadata: {
          redirect_uris: ["http://127.0.0.1/cb"],
          token_endpoint_auth_method: "none",
          grant_types: ["authorization_code"],
          response_types: ["code"],
        },
      });
    }
    assert.deepEqual((await t.store.listClients()).map((c) => c.clientId), ["a", "b"]);
    assert.equal((await t.store.countRecords()).clients, 2);
    const [first, second] = await Promise.all([
      t.store.deleteClient("a"),
      t.store.deleteClient("a"),
    ]);
    assert.deepEqual([first, second].sort(), [false, true], "a concurrent delete counts once");
    assert.equal(await t.store.getClient("a"), null);
    assert.equal(await t.store.deleteClient("missing"), false);
  }));

Deno.test("operator store: a deleted client stays deleted when an /authorize that read it records its use", () =>
  withApp(async (t) => {
    const redirectUris = ["http://127.0.0.1/cb"];
    await t.store.registerClient({
      clientId: "c",
      clientIdIssuedAt: 1,
      redirectUris,
      metadata: {
        redirect_uris: redirectUris,
        token_endpoint_auth_method: "none",
        grant_types: ["authorization_code"],
        response_types: ["code"],
      },
    });
    const readByAuthorize = await t.store.getClient("c");
    assert.ok(readByAuthorize);
    assert.equal(await t.store.deleteClient("c"), true);
    await t.store.recordClientUse(readByAuthorize);
    assert.equal(await t.store.getClient("c"), null, "the use does not register it again");
  }));
