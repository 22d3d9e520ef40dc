/**
 * The operator's CLI ends sessions as the service's /revoke does: each only if unchanged since
 * it was read. A GitLab renewal saved between the CLI's read and its delete (a client's refresh,
 * over HTTP, here) is read again and its NEW GitLab token revoked: deleting the renewed record
 * and revoking the old token read left the new one live at GitLab, held by nothing. Two identical
 * commands at once count each session once, in `revocations_total{outcome="operator"}` and in
 * their log lines (found by review: each counted every session it had listed). A session whose
 * holder refreshes it before every attempt is ended all the same (it was left live, with a
 * warning to run the command again).
 */

import assert from "node:assert/strict";
import { runStoreCommand, type StoreCommand } from "../src/admin/commands.ts";
import type { LogFields, Logger } from "../src/logger.ts";
import type { Store } from "../src/store/mod.ts";
import { echo, mcpRequest, startScripted } from "./_gateway.ts";
import {
  exchange,
  makeTestApp,
  poll,
  refresh,
  startFlow,
  type TestApp,
  withApp,
} from "./_helpers.ts";

/** Two hours, as the fake GitLab's tokens live. */
const GITLAB_TOKEN_TTL_MS = 7200 * 1000;

/** Signs in over HTTP holding the GitLab access token `gitlabToken`; answers the refresh token. */
async function signIn(t: TestApp, gitlabToken: string): Promise<string> {
  const flowState = await startFlow(t);
  t.upstream.approve({ accessToken: gitlabToken, refreshToken: `${gitlabToken}-refresh` });
  const { code } = await (await poll(t, flowState)).json();
  const response = await exchange(t, code);
  assert.equal(response.status, 200);
  return (await response.json()).refresh_token;
}

/** A logger that keeps every line, as its message and fields. */
function recording(): { logger: Logger; lines: (LogFields & { message: string })[] } {
  const lines: (LogFields & { message: string })[] = [];
  const log = (message: string, fields: LogFields = {}) => lines.push({ ...fields, message });
  return { logger: { info: log, warn: log, error: log }, lines };
}

/** Runs `command` as `deno task admin` runs it, over `store`; answers its exit code and lines. */
async function runCli(t: TestApp, store: Store, command: StoreCommand) {
  const { logger, lines } = recording();
  const code = await runStoreCommand(command, {
    store,
    upstream: t.upstream,
    logger,
    print: () => {},
    kvFileSize: () => Promise.resolve(undefined),
  });
  const action = lines.find((line) => line.message === "operator action");
  return { code, action, lines };
}

/** `store`, running `meanwhile` once right after the CLI's first read of sessions. */
function afterFirstRead(store: Store, meanwhile: () => Promise<void>): Store {
  let pending: (() => Promise<void>) | undefined = meanwhile;
  const once = async () => {
    const run = pending;
    pending = undefined;
    await run?.();
  };
  return {
    ...store,
    async listSessions(filter) {
      const read = await store.listSessions(filter);
      await once();
      return read;
    },
    async readSession(id) {
      const read = await store.readSession(id);
      await once();
      return read;
    },
  };
}

const RENEWAL_CASES: [string, (t: TestApp, id: string, clientId: string) => StoreCommand][] = [
  ["sessions revoke --id", (_t, id) => ({
    name: "sessions revoke",
    by: { id },
    keepGitLabTokens: false,
  })],
  ["sessions revoke --user", () => ({
    name: "sessions revoke",
    by: { user: "ada" },
    keepGitLabTokens: false,
  })],
  ["clients delete", (_t, _id, clientId) => ({
    name: "clients delete",
    clientId,
    keepGitLabTokens: false,
  })],
];

for (const [name, commandFor] of RENEWAL_CASES) {
  Deno.test(`admin ${name}: a GitLab renewal saved after the CLI read the session has its new token revoked`, () =>
    withApp(async (t) => {
      const refreshToken = await signIn(t, "gl-access-old");
      const [listed] = await t.store.listSessions();
      // GitLab's token is about to expire: the client's next refresh renews it first.
      t.clock.advance(GITLAB_TOKEN_TTL_MS - 60_000);
      t.upstream.refreshes.push({
        accessToken: "gl-access-renewed",
        refreshToken: "gl-refresh-renewed",
        expiresInSeconds: 7200,
      });
      let renewed = "";
      const store = afterFirstRead(t.store, async () => {
        const response = await refresh(t, refreshToken);
        assert.equal(response.status, 200);
        renewed = (await response.json()).refresh_token;
      });

      const run = await runCli(t, store, commandFor(t, listed.value.id, listed.value.clientId));

      assert.equal(run.code, 0);
      assert.equal(t.upstream.calls.refresh, 1, "the renewal ran between the read and the delete");
      assert.deepEqual(t.upstream.revokedTokens, ["gl-access-renewed"], "the token it held last");
      assert.equal(await t.store.readSession(listed.value.id), null, "the session is gone");
      assert.equal((await (await refresh(t, renewed)).json()).error, "invalid_grant");
      assert.deepEqual([run.action?.sessions, run.action?.gitlabTokensRevoked], [1, 1]);
      assert.equal(await t.store.takeOperatorRevocations(), 1);
    }));
}

Deno.test("admin sessions revoke: two identical commands at once count and revoke each session once", () =>
  withApp(async (t) => {
    await signIn(t, "gl-access-a");
    await signIn(t, "gl-access-b");
    // Both commands have read the sessions before either deletes one.
    let arrived = 0;
    let bothRead = () => {};
    const barrier = new Promise<void>((resolve) => bothRead = resolve);
    const store: Store = {
      ...t.store,
      async listSessions(filter) {
        const read = await t.store.listSessions(filter);
        if (++arrived === 2) bothRead();
        await barrier;
        return read;
      },
    };
    const command: StoreCommand = {
      name: "sessions revoke",
      by: { user: "ada" },
      keepGitLabTokens: false,
    };

    const runs = await Promise.all([runCli(t, store, command), runCli(t, store, command)]);

    assert.deepEqual(runs.map((run) => run.code), [0, 0]);
    const sessions = runs.map((run) => Number(run.action?.sessions));
    assert.equal(sessions[0] + sessions[1], 2, `each session counted once: ${sessions}`);
    assert.equal(await t.store.takeOperatorRevocations(), 2, "the service's metric counts 2");
    assert.deepEqual(t.upstream.revokedTokens.toSorted(), ["gl-access-a", "gl-access-b"]);
    assert.deepEqual(await t.store.listSessions(), []);
  }));

Deno.test("admin sessions revoke: a session refreshed before every attempt to end it is ended all the same, its last GitLab token revoked", async () => {
  const mcp = startScripted(echo);
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: mcp.url } });
  try {
    let refreshToken = await signIn(t, "gl-access-busy");
    const accessTokens: string[] = [];
    const [listed] = await t.store.listSessions();
    // GitLab's token is about to expire: the first of the holder's refreshes renews it.
    t.clock.advance(GITLAB_TOKEN_TTL_MS - 60_000);
    t.upstream.refreshes.push({
      accessToken: "gl-access-renewed",
      refreshToken: "gl-refresh-renewed",
      expiresInSeconds: 7200,
    });
    // The session's holder refreshes it just before each of the CLI's checked deletes.
    let refreshes = 0;
    const store: Store = {
      ...t.store,
      async deleteSessionIfUnchanged(session) {
        const response = await refresh(t, refreshToken);
        assert.equal(response.status, 200);
        const body = await response.json();
        refreshToken = body.refresh_token;
        accessTokens.push(body.access_token);
        refreshes++;
        return await t.store.deleteSessionIfUnchanged(session);
      },
    };
    const command: StoreCommand = {
      name: "sessions revoke",
      by: { id: listed.value.id },
      keepGitLabTokens: false,
    };

    const run = await runCli(t, store, command);

    assert.equal(run.code, 0);
    assert.ok(refreshes >= 4, `every checked delete lost: ${refreshes} refreshes`);
    assert.equal(t.upstream.calls.refresh, 1, "GitLab renewed the token during the race");
    assert.deepEqual([run.action?.sessions, run.action?.gitlabTokensRevoked], [1, 1]);
    assert.equal(await t.store.takeOperatorRevocations(), 1);
    assert.equal(await t.store.readSession(listed.value.id), null, "the session is ended");
    assert.deepEqual(t.upstream.revokedTokens, ["gl-access-renewed"], "the token it held last");
    assert.equal((await (await refresh(t, refreshToken)).json()).error, "invalid_grant");
    for (const accessToken of accessTokens) {
      const call = await mcpRequest(t, accessToken, { body: "{}" });
      assert.equal(call.status, 401, "no access token of the session is accepted");
      await call.body?.cancel();
    }
    assert.equal(mcp.requests.length, 0);
  } finally {
    t.close();
    await mcp.close();
  }
});
