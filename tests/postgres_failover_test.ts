/**
 * After a PostgreSQL failover, over real HTTP against the app on a real PostgreSQL: a database
 * left refusing writes (a standby, `default_transaction_read_only`) makes `/readyz` answer 503
 * `read_only`, so that a load balancer sends the traffic to instances that can serve it; and
 * connections the database's new host resets when they are next used (its address moved to
 * another machine) cost no request a 503: a read finds a fresh connection.
 */

import assert from "node:assert/strict";
import net from "node:net";
import { openDatabase } from "../src/store/open.ts";
import { createLogger } from "../src/logger.ts";
import { issueTokens, makeTestAppOn, refresh, register, TEST_BASE } from "./_helpers.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";

type TestApp = Awaited<ReturnType<typeof makeTestAppOn>>;

async function readiness(app: TestApp): Promise<{ status: number; body: unknown }> {
  const response = await app.app(new Request(`${TEST_BASE}/readyz`));
  return { status: response.status, body: await response.json() };
}

/** Ends the app's connections to `database`: its pool opens new ones, with its settings. */
async function endConnections(database: string): Promise<void> {
  await (await sharedPostgres()).psql(
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${database}'`,
  );
}

Deno.test({
  name:
    "postgres failover: a database that refuses writes (a standby, default_transaction_read_only) → /readyz 503 kv read_only, logged; writable again → 200",
  ignore: ignorePostgresTests,
  async fn() {
    const cluster = await sharedPostgres();
    const url = await cluster.createDatabase();
    const database = new URL(url).pathname.slice(1);
    const opened = await openDatabase({ databaseUrl: url, databasePoolSize: 2 });
    const lines: string[] = [];
    const app = await makeTestAppOn(opened.database, {
      logger: createLogger((line) => void lines.push(line)),
    });
    try {
      const ready = { status: "ok", checks: { kv: "ok", configuration: "ok" } };
      assert.deepEqual(await readiness(app), { status: 200, body: ready });
      await cluster.psql(`ALTER DATABASE ${database} SET default_transaction_read_only = on`);
      await endConnections(database);
      assert.deepEqual(await readiness(app), {
        status: 503,
        body: { status: "unavailable", checks: { kv: "read_only", configuration: "ok" } },
      });
      assert.equal(
        (await register(app, { redirect_uris: ["http://127.0.0.1:1/cb"] })).status,
        503,
        "a write is refused meanwhile",
      );
      assert.ok(lines.some((line) => line.includes("readiness check: KV read-only")));
      await cluster.psql(`ALTER DATABASE ${database} RESET default_transaction_read_only`);
      await endConnections(database);
      assert.deepEqual(await readiness(app), { status: 200, body: ready });
      assert.equal((await register(app, { redirect_uris: ["http://127.0.0.1:1/cb"] })).status, 201);
    } finally {
      app.close();
      await opened.close();
    }
  },
});

/**
 * A TCP proxy in front of PostgreSQL whose `failover()` acts as the database's address moving
 * to another host: the connections open until then are unknown there, so the next bytes a
 * client sends on one are answered with a reset; new connections are served.
 */
async function movableAddress(targetPort: number) {
  let generation = 0;
  const sockets = new Set<net.Socket>();
  const upstreams = new Set<Deno.Conn>();
  const server = net.createServer(async (client) => {
    const born = generation;
    client.pause();
    sockets.add(client);
    client.on("error", () => {});
    const upstream = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
    upstreams.add(upstream);
    const closeUpstream = () => {
      if (upstreams.delete(upstream)) upstream.close();
    };
    client.on("data", (chunk: Uint8Array) => {
      if (born !== generation) {
        client.resetAndDestroy();
        closeUpstream();
        return;
      }
      upstream.write(chunk).catch(() => {});
    });
    client.on("close", () => {
      sockets.delete(client);
      closeUpstream();
    });
    client.resume();
    (async () => {
      const buffer = new Uint8Array(64 * 1024);
      for (let n = await upstream.read(buffer); n !== null; n = await upstream.read(buffer)) {
        // The old host is gone: what it would still say never arrives.
        if (born === generation) client.write(buffer.slice(0, n));
      }
    })().catch(() => {/* closed */});
  });
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  return {
    port: (server.address() as net.AddressInfo).port,
    failover() {
      generation++;
    },
    close() {
      server.close();
      for (const socket of sockets) socket.destroy();
      for (const upstream of upstreams) upstream.close();
      upstreams.clear();
    },
  };
}

Deno.test({
  name:
    "postgres failover: every idle connection reset by the database's new host → /readyz, a refresh and a registration are served at once, no 503",
  ignore: ignorePostgresTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cluster = await sharedPostgres();
    const direct = new URL(await cluster.createDatabase());
    const address = await movableAddress(Number(direct.port));
    direct.port = String(address.port);
    const poolSize = 4;
    const opened = await openDatabase({ databaseUrl: direct.href, databasePoolSize: poolSize });
    const app = await makeTestAppOn(opened.database);
    try {
      const tokens = await issueTokens(app);
      // Every connection of the pool open (and idle) when the address moves.
      const backend = opened.database as { getMany(keys: Deno.KvKey[]): Promise<unknown> };
      await Promise.all(Array.from({ length: poolSize }, () => backend.getMany([["warm"]])));
      address.failover();
      const ready = await readiness(app);
      assert.equal(ready.status, 200, JSON.stringify(ready.body));
      const refreshed = await refresh(app, tokens.refresh_token);
      assert.equal(refreshed.status, 200, await refreshed.clone().text());
      assert.ok((await refreshed.json()).refresh_token);
      assert.equal((await register(app, { redirect_uris: ["http://127.0.0.1:1/cb"] })).status, 201);
    } finally {
      app.close();
      // postgres.js 3.4.9 keeps the statement of a connection that was reset as its current
      // one, so that `end` waits for its timeout (5 s; at shutdown, within the stop budget).
      await Promise.race([opened.close(), new Promise((done) => setTimeout(done, 500))]);
      address.close();
    }
  },
});
