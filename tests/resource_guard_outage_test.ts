/**
 * The library guard (`mod.ts`) while the store's database cannot answer: an MCP server behind
 * it, over real HTTP, answers 503 `temporarily_unavailable` with `Retry-After` as the service
 * does (not an exception in the MCP server), and serves again once the database is back,
 * without a restart. On PostgreSQL (the cluster stopped and started) and on a KV backend that
 * reports itself unavailable.
 */

import { testGuard } from "./_guard.ts";
import assert from "node:assert/strict";
import type { StoreDatabase } from "../mod.ts";
import { switchableKv } from "./_switchable_kv.ts";
import { openDatabase } from "../src/store/open.ts";
import { issueTokens, makeTestAppOn, type TestApp } from "./_helpers.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";

/** An MCP server on loopback behind the guard: 200 with the user's name when let through. */
function serveBehindGuard(t: TestApp<StoreDatabase>) {
  const guard = testGuard(t);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const result = await guard.authenticate(request);
    if (result instanceof Response) return result;
    return Response.json({ user: result.user.username });
  });
  return {
    call: (token: string) =>
      fetch(`http://127.0.0.1:${server.addr.port}/mcp`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: "{}",
      }),
    close: () => server.shutdown(),
  };
}

async function assertStoreUnavailable(response: Response): Promise<void> {
  assert.equal(response.status, 503);
  assert.equal(response.headers.get("Retry-After"), "5");
  assert.match(response.headers.get("Content-Type") ?? "", /^application\/json/);
  assert.deepEqual(await response.json(), {
    error: "temporarily_unavailable",
    error_description: "The service's database is unavailable",
  });
}

async function assertServed(response: Response): Promise<void> {
  assert.equal(response.status, 200, await response.clone().text());
  assert.deepEqual(await response.json(), { user: "ada" });
}

/** Runs the outage: tokens issued, the database `down`, then `up` again. */
async function outageBehindGuard(
  database: StoreDatabase,
  outage: { down(): Promise<void>; up(): Promise<void> },
): Promise<void> {
  const t = await makeTestAppOn(database);
  const mcp = serveBehindGuard(t);
  try {
    const { access_token } = await issueTokens(t);
    const { access_token: second } = await issueTokens(t);
    await assertServed(await mcp.call(access_token));
    await outage.down();
    try {
      // A token the guard has not met yet: its session must be read.
      await assertStoreUnavailable(await mcp.call(second));
    } finally {
      await outage.up();
    }
    await assertServed(await mcp.call(second));
  } finally {
    await mcp.close();
  }
}

Deno.test({
  name: "guard outage: PostgreSQL stopped, 503 with Retry-After; started, served again",
  ignore: ignorePostgresTests,
  async fn() {
    const cluster = await sharedPostgres();
    const opened = await openDatabase({
      databaseUrl: await cluster.createDatabase(),
      databasePoolSize: 2,
    });
    try {
      await outageBehindGuard(opened.database, { down: cluster.pause, up: cluster.start });
    } finally {
      await opened.close();
    }
  },
});

Deno.test("guard outage: KV unavailable, 503 with Retry-After; back, served again", async () => {
  const kv = switchableKv(await Deno.openKv(":memory:"));
  try {
    await outageBehindGuard(kv, {
      down: () => Promise.resolve(void (kv.unavailable = true)),
      up: () => Promise.resolve(void (kv.unavailable = false)),
    });
  } finally {
    kv.close();
  }
});
