/**
 * The database may hang, and the service must not (issue 38 §1): with DATABASE_TIMEOUT_MS set,
 * every request that needs the store is answered within it, 503 `temporarily_unavailable` with
 * `Retry-After`, whether PostgreSQL is stopped mid-conversation (SIGSTOP: connections open, no
 * answer), gone (connection refused), holding one write back, or a KV backend never answers;
 * and the same process serves again once the database answers. The app is served over
 * loopback HTTP; tokens are issued before the outage.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import type { StoreDatabase } from "../src/store/mod.ts";
import type { KvBackend } from "../src/store/backend.ts";
import { openDatabase } from "../src/store/open.ts";
import { advisoryLockOf } from "../src/store/postgres/backend.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  type AppLike,
  authorize,
  issueTokens,
  makeTestAppOn,
  refresh,
  register,
  TEST_REDIRECT,
  type TestApp,
} from "./_helpers.ts";
import { echo, startScripted } from "./_gateway.ts";
import { ignorePostgresTests, type PostgresCluster, sharedPostgres } from "./_postgres.ts";

const TIMEOUT_MS = 500;
/** What an answer may take beyond the budget: the request's own work on a busy machine. */
const SLACK_MS = 300;
/** How long a fetch may wait before the test calls the request hung. */
const HUNG_MS = 4_000;
/** The issue's bound on recovery once the database answers again. */
const RECOVERY_MS = 20_000;

/** The app served on loopback, and an AppLike that reaches it over HTTP. */
function serve(t: TestApp<StoreDatabase>): AppLike & { close(): Promise<void> } {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (r) => t.app(r));
  const origin = `http://127.0.0.1:${server.addr.port}`;
  return {
    async app(request: Request) {
      const url = new URL(request.url);
      const body = request.body ? await request.arrayBuffer() : undefined;
      return await fetch(`${origin}${url.pathname}${url.search}`, {
        method: request.method,
        headers: request.headers,
        body,
        redirect: "manual",
        signal: AbortSignal.timeout(HUNG_MS),
      });
    },
    // Bounded: a request still hung (without the deadline) must not hang the test's end.
    close: () =>
      Promise.race([server.shutdown(), new Promise((done) => setTimeout(done, HUNG_MS))])
        .then(() => {}),
  };
}

/** The four kinds of request the issue names, over HTTP. */
function requests(http: AppLike, refreshToken: string, accessToken: string) {
  return {
    "POST /token (refresh)": () => refresh(http, refreshToken),
    "POST /register": () => register(http, { redirect_uris: [TEST_REDIRECT] }),
    "GET /authorize": () => authorize(http),
    "POST /mcp (gateway)": () =>
      http.app(
        new Request("http://auth.test/mcp", {
          method: "POST",
          headers: {
            Authorization: `Bearer ${accessToken}`,
            "Content-Type": "application/json",
            Accept: "application/json, text/event-stream",
          },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        }),
      ),
  };
}

/** `call` answers 503 temporarily_unavailable with Retry-After within the deadline. */
async function assertUnavailableInTime(what: string, call: () => Promise<Response>) {
  const started = performance.now();
  let response: Response;
  try {
    response = await call();
  } catch (error) {
    assert.fail(`${what}: no answer in ${HUNG_MS} ms (${error})`);
  }
  const ms = performance.now() - started;
  const text = await response.text();
  assert.equal(response.status, 503, `${what}: ${text}`);
  assert.equal(response.headers.get("Retry-After"), "5", what);
  assert.equal(JSON.parse(text).error, "temporarily_unavailable", what);
  assert.ok(ms <= TIMEOUT_MS + SLACK_MS, `${what} answered after ${Math.round(ms)} ms`);
}

/** Polls `call` until it answers `status`; fails after RECOVERY_MS. */
async function assertRecovers(what: string, call: () => Promise<Response>, status: number) {
  const started = performance.now();
  let last = "";
  while (performance.now() - started < RECOVERY_MS) {
    try {
      const response = await call();
      last = `${response.status} ${await response.text()}`;
      if (response.status === status) return;
    } catch (error) {
      last = String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail(`${what} did not recover within ${RECOVERY_MS} ms: ${last}`);
}

/** An app on a fresh database of the test cluster, a gateway in front of an echoing MCP server. */
async function appOnPostgres(cluster: PostgresCluster, env: Record<string, string> = {}) {
  const url = await cluster.createDatabase();
  const opened = await openDatabase({ databaseUrl: url, databasePoolSize: 4 });
  const mcp = startScripted(echo);
  const t = await makeTestAppOn(opened.database, {
    env: { DATABASE_TIMEOUT_MS: String(TIMEOUT_MS), MCP_UPSTREAM_URL: mcp.url, ...env },
  });
  const http = serve(t);
  return {
    url,
    t,
    http,
    async close() {
      await http.close();
      t.close();
      await mcp.close();
      await opened.close();
    },
  };
}

function signal(pids: number[], name: "SIGSTOP" | "SIGCONT"): void {
  for (const pid of pids) {
    try {
      Deno.kill(pid, name);
    } catch {
      // A process that ended meanwhile.
    }
  }
}

Deno.test({
  name: "database deadline: PostgreSQL stopped (SIGSTOP) → 503 with Retry-After in time on " +
    "token, register, authorize and gateway; SIGCONT → the same process serves again",
  ignore: ignorePostgresTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cluster = await sharedPostgres();
    const s = await appOnPostgres(cluster);
    try {
      const tokens = await issueTokens(s.t);
      // Tokens the gateway and /token have not met yet: their sessions must be read.
      const fresh = await issueTokens(s.t);
      const calls = requests(s.http, tokens.refresh_token, fresh.access_token);
      const pids = cluster.pids();
      signal(pids, "SIGSTOP");
      try {
        for (const [what, call] of Object.entries(calls)) {
          await assertUnavailableInTime(what, call);
        }
        // Again, with the first attempts still waiting on the stopped database.
        for (const [what, call] of Object.entries(calls)) {
          await assertUnavailableInTime(`${what} (again)`, call);
        }
      } finally {
        signal(pids, "SIGCONT");
      }
      await assertRecovers("POST /register", calls["POST /register"], 201);
      await assertRecovers("GET /authorize", calls["GET /authorize"], 200);
      await assertRecovers("POST /mcp", calls["POST /mcp (gateway)"], 200);
      await assertRecovers("POST /token", calls["POST /token (refresh)"], 200);
    } finally {
      await s.close();
    }
  },
});

Deno.test({
  name: "database deadline: PostgreSQL down (connection refused) → 503, not 500, on every " +
    "route; started again → served by the same process",
  ignore: ignorePostgresTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cluster = await sharedPostgres();
    const s = await appOnPostgres(cluster);
    try {
      const tokens = await issueTokens(s.t);
      const fresh = await issueTokens(s.t);
      const calls = requests(s.http, tokens.refresh_token, fresh.access_token);
      await cluster.pause();
      try {
        for (const [what, call] of Object.entries(calls)) {
          await assertUnavailableInTime(what, call);
        }
      } finally {
        await cluster.start();
      }
      await assertRecovers("POST /register", calls["POST /register"], 201);
      await assertRecovers("POST /token", calls["POST /token (refresh)"], 200);
    } finally {
      await s.close();
    }
  },
});

Deno.test({
  name: "database deadline: a rotation held back past the deadline is answered 503 and is " +
    "then either committed or not: the old token's retry gets one working pair",
  ignore: ignorePostgresTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cluster = await sharedPostgres();
    // A lost answer is handled as any lost answer is: here, by the refresh grace.
    const s = await appOnPostgres(cluster, { REFRESH_GRACE_SECONDS: "60" });
    const holder = postgres(s.url, { max: 1, onnotice: () => {} });
    try {
      const { refresh_token } = await issueTokens(s.t);
      const [session] = await recordsOf(s.t.kv, "session");
      const lock = String(advisoryLockOf(session.key));
      // The rotation's commit waits for the session's lock, held here: reads still answer.
      await holder`SELECT pg_advisory_lock(${lock}::bigint)`;
      try {
        await assertUnavailableInTime("refresh", () => refresh(s.http, refresh_token));
      } finally {
        await holder`SELECT pg_advisory_unlock(${lock}::bigint)`;
      }
      // The held commit, if it was sent, ends now: wait until no commit is running.
      await assertRecovers("the held commit", async () => {
        const [{ running }] = await holder`
          SELECT count(*)::int AS running FROM pg_stat_activity
          WHERE query LIKE '%kv_commit(%' AND state = 'active' AND pid <> pg_backend_pid()`;
        return new Response(null, { status: running === 0 ? 204 : 409 });
      }, 204);
      const [held] = await recordsOf(s.t.kv, "session");
      assert.notEqual(held.versionstamp, session.versionstamp, "the held rotation committed");
      // Committed after its 503 (an answer lost): the retry is answered again within the grace.
      const retried = await refresh(s.http, refresh_token);
      const text = await retried.text();
      assert.equal(retried.status, 200, text);
      const next = JSON.parse(text).refresh_token;
      const after = await refresh(s.http, next);
      assert.equal(after.status, 200, await after.text());
    } finally {
      await holder.end({ timeout: 1 });
      await s.close();
    }
  },
});

/** A Deno KV that stops answering (its promises never settle) while `hung`. */
function hangingKv(kv: Deno.Kv): KvBackend & { hung: boolean } {
  const never = <T>() => new Promise<T>(() => {});
  const backend = {
    hung: false,
    getMany(keys: readonly Deno.KvKey[]) {
      return backend.hung
        ? never<Deno.KvEntryMaybe<unknown>[]>()
        : kv.getMany(keys as Deno.KvKey[]);
    },
    async *list<T>(
      selector: Deno.KvListSelector,
      options?: { limit?: number; batchSize?: number },
    ) {
      if (backend.hung) await never();
      yield* kv.list<T>(selector, options);
    },
    commit({ checks, mutations }: Parameters<KvBackend["commit"]>[0]) {
      if (backend.hung) return never<Deno.KvCommitResult>();
      return kv.atomic().check(...checks).mutate(...mutations).commit();
    },
    close: () => kv.close(),
  };
  return backend;
}

Deno.test("database deadline: a Deno KV that never answers → 503 with Retry-After in time; answering again → served", async () => {
  const kv = hangingKv(await Deno.openKv(":memory:"));
  const mcp = startScripted(echo);
  const t = await makeTestAppOn(kv, {
    env: { DATABASE_TIMEOUT_MS: String(TIMEOUT_MS), MCP_UPSTREAM_URL: mcp.url },
  });
  const http = serve(t);
  try {
    const tokens = await issueTokens(t);
    const fresh = await issueTokens(t);
    const calls = requests(http, tokens.refresh_token, fresh.access_token);
    kv.hung = true;
    for (const [what, call] of Object.entries(calls)) {
      await assertUnavailableInTime(what, call);
    }
    kv.hung = false;
    for (const [what, call] of Object.entries(calls)) {
      const response = await call();
      assert.ok(response.status < 400, `${what}: ${response.status} ${await response.text()}`);
    }
  } finally {
    await http.close();
    t.close();
    await mcp.close();
    kv.close();
  }
});

/**
 * A TCP proxy to PostgreSQL that can cut the network as a partition does: the connections open
 * when it is cut stay open and never carry a byte again (the kernel would wait a quarter of an
 * hour to give up on them), and new ones get no answer until it heals.
 */
function partitionableProxy(targetPort: number) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  let generation = 0;
  let cut = false;
  const pipe = async (from: Deno.Conn, to: Deno.Conn, born: number) => {
    const buffer = new Uint8Array(64 * 1024);
    try {
      for (let n = await from.read(buffer); n !== null; n = await from.read(buffer)) {
        // Bytes on a connection from before the cut, or during it, are lost.
        if (born !== generation || cut) continue;
        await to.write(buffer.subarray(0, n));
      }
    } catch {
      // The proxy closed.
    }
  };
  (async () => {
    for await (const client of listener) {
      conns.push(client);
      const born = generation;
      try {
        const server = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
        conns.push(server);
        pipe(client, server, born);
        pipe(server, client, born);
      } catch {
        client.close();
      }
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    cut() {
      cut = true;
      generation++;
    },
    heal() {
      cut = false;
    },
    close() {
      listener.close();
      for (const conn of conns) {
        try {
          conn.close();
        } catch {
          // Closed already.
        }
      }
    },
  };
}

Deno.test({
  name: "database deadline: a network partition that keeps the connections open → 503 in " +
    "time; healed → the same process serves again (the wedged pool is replaced)",
  ignore: ignorePostgresTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cluster = await sharedPostgres();
    const direct = new URL(await cluster.createDatabase());
    const proxy = partitionableProxy(Number(direct.port));
    direct.port = String(proxy.port);
    const opened = await openDatabase({
      databaseUrl: direct.href,
      // One connection, so the partition holds all of them.
      databasePoolSize: 1,
      databaseTimeoutMs: TIMEOUT_MS,
    });
    const t = await makeTestAppOn(opened.database, {
      env: { DATABASE_TIMEOUT_MS: String(TIMEOUT_MS) },
    });
    const http = serve(t);
    try {
      const { refresh_token } = await issueTokens(t);
      const calls = requests(http, refresh_token, "");
      proxy.cut();
      await assertUnavailableInTime("POST /register", calls["POST /register"]);
      await assertUnavailableInTime("POST /token (refresh)", calls["POST /token (refresh)"]);
      proxy.heal();
      await assertRecovers("POST /register", calls["POST /register"], 201);
      await assertRecovers("POST /token", calls["POST /token (refresh)"], 200);
    } finally {
      await http.close();
      t.close();
      proxy.close();
      await Promise.race([opened.close(), new Promise((done) => setTimeout(done, 1000))]);
    }
  },
});
