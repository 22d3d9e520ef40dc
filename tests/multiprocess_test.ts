/**
 * Several service processes (`main.ts`) sharing one KV file and one simulated GitLab: races on
 * one authorization code, one refresh token and one completing device flow, spread round-robin
 * over the processes. SQLite answers "database is locked" now and then when processes write at
 * once; the store retries, so exactly one request wins each race and nothing answers 500.
 */

import assert from "node:assert/strict";
import { type SimulatedGitLab, startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { kindOfKey, recordsOf } from "../src/store/keys.ts";
import { assertNo500, assertOneComplete, assertOneWinner, TEST_SECRET } from "./_helpers.ts";
import { KV_FILE, type SharedStore, STORE_KINDS, type StoreKind } from "./_stores.ts";
import {
  assertFlowComplete,
  authorizeOverHttp,
  exchangeOverHttp,
  type HttpResult as Result,
  pollOverHttp,
  refreshOverHttp,
  type ServiceProcess,
  spawnService,
} from "./_service.ts";

const PARALLEL = 20;
const REDIRECT_URI = "http://127.0.0.1:9/callback";
/** The authorization request every sign-in here makes. */
const AUTHORIZE = { client_id: "multi-client", redirect_uri: REDIRECT_URI, state: "st" };

/** A cluster of processes on one store (KV file or PostgreSQL), with the GitLab they share. */
interface Cluster {
  gitlab: SimulatedGitLab;
  services: ServiceProcess[];
  urls: string[];
}

/**
 * Runs `fn` on a cluster of `size` processes, stops them, checks their logs and exit codes,
 * then hands the KV file to `inspect` before it is removed.
 */
async function withCluster(
  size: number,
  fn: (cluster: Cluster) => Promise<void>,
  inspect?: (store: SharedStore) => Promise<void>,
  kind: StoreKind = KV_FILE,
): Promise<void> {
  const gitlab = startSimulatedGitLab();
  const store = await kind.create();
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "multi-app",
    JWT_SECRET: TEST_SECRET,
    ...store.env,
  };
  const services: ServiceProcess[] = [];
  try {
    let codes: number[] = [];
    try {
      // The first one creates the database; the others open it.
      services.push(await spawnService(env));
      services.push(
        ...await Promise.all(Array.from({ length: size - 1 }, () => spawnService(env))),
      );
      await fn({ gitlab, services, urls: services.map((s) => s.url) });
    } finally {
      codes = await Promise.all(services.map((service) => service.stop()));
      await gitlab.close();
    }
    for (const [i, service] of services.entries()) {
      const unhandled = service.logs.filter((line) => line.includes("unhandled error"));
      assert.deepEqual(unhandled, [], `process ${i} logged unhandled errors`);
      const status500 = service.logs.filter((line) => line.includes('"status":500'));
      assert.deepEqual(status500, [], `process ${i} answered 500`);
    }
    assert.deepEqual(codes, codes.map(() => 0), "every process exits cleanly");
    await inspect?.(store);
  } finally {
    await store.dispose();
  }
}

/** Authorizes at process `via`, approves, polls at the next process; returns the code. */
async function issueCode(cluster: Cluster, via = 0): Promise<string> {
  const base = cluster.urls[via % cluster.urls.length];
  const { flowState } = await authorizeOverHttp(base, AUTHORIZE);
  cluster.gitlab.approve(cluster.gitlab.lastUserCode()!);
  const done = await pollOverHttp(cluster.urls[(via + 1) % cluster.urls.length], flowState);
  assertFlowComplete(done);
  return done.body.code as string;
}

function exchange(base: string, code: string): Promise<Result> {
  return exchangeOverHttp(base, code, REDIRECT_URI);
}

/** Fires `PARALLEL` requests at once, request i to process i mod n. */
function race(cluster: Cluster, request: (base: string) => Promise<Result>): Promise<Result[]> {
  return Promise.all(
    Array.from({ length: PARALLEL }, (_, i) => request(cluster.urls[i % cluster.urls.length])),
  );
}

async function codeRace(cluster: Cluster): Promise<void> {
  const code = await issueCode(cluster);
  const winner = assertOneWinner(await race(cluster, (base) => exchange(base, code)));
  assert.equal(typeof winner.body.refresh_token, "string");
  // The code is spent everywhere; the winner's refresh token works on any process.
  assert.equal((await exchange(cluster.urls[1], code)).status, 400);
  const refreshed = await refreshOverHttp(cluster.urls.at(-1)!, winner.body.refresh_token);
  assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
}

async function refreshRace(cluster: Cluster): Promise<void> {
  const issued = await exchange(cluster.urls[0], await issueCode(cluster, 1));
  assert.equal(issued.status, 200);
  const refreshToken = issued.body.refresh_token as string;
  const results = await race(cluster, (base) => refreshOverHttp(base, refreshToken));
  const winner = assertOneWinner(results);
  assert.equal(cluster.gitlab.calls.refresh, 0, "the GitLab token was not expiring");
  const replay = await refreshOverHttp(cluster.urls[1], refreshToken);
  assert.equal(replay.status, 400);
  const next = await refreshOverHttp(cluster.urls[0], winner.body.refresh_token);
  assert.equal(next.status, 200, JSON.stringify(next.body));
}

async function flowRace(cluster: Cluster): Promise<void> {
  const { flowState } = await authorizeOverHttp(cluster.urls[0], AUTHORIZE);
  const deviceTokenCalls = cluster.gitlab.calls.deviceToken;
  const userCalls = cluster.gitlab.calls.user;
  cluster.gitlab.approve(cluster.gitlab.lastUserCode()!);
  const results = await race(cluster, (base) => pollOverHttp(base, flowState));
  assertNo500(results);
  const complete = assertOneComplete(results);
  // GitLab spent the device code once and was asked about the user once.
  assert.equal(cluster.gitlab.calls.deviceToken - deviceTokenCalls, 1);
  assert.equal(cluster.gitlab.calls.user - userCalls, 1);

  const code = complete.body.code as string;
  const exchanges = await race(cluster, (base) => exchange(base, code));
  assertOneWinner(exchanges);
  const after = await pollOverHttp(cluster.urls[1], flowState);
  assert.deepEqual(after, { status: 400, body: { status: "expired", error: "Flow not found" } });
}

/** What is left in the shared store once every process has stopped. */
async function inspectKv(store: SharedStore): Promise<Record<string, number>> {
  const { database: kv, close } = await store.open();
  try {
    const counts: Record<string, number> = {};
    for (const entry of await recordsOf<{ mcpRefreshTokenHash?: string }>(kv)) {
      const kind = String(kindOfKey(entry.key));
      counts[kind] = (counts[kind] ?? 0) + 1;
      if (kind === "session" && entry.value.mcpRefreshTokenHash) {
        counts.sessionsWithRefreshToken = (counts.sessionsWithRefreshToken ?? 0) + 1;
      }
    }
    return counts;
  } finally {
    await close();
  }
}

for (const kind of STORE_KINDS) {
  for (const size of [2, 4]) {
    const on = kind === KV_FILE ? "one KV file" : `one ${kind.name} database`;
    Deno.test({
      name: `multiprocess: ${size} processes on ${on}, 20-way races`,
      ignore: kind.ignore,
      fn: (t) => racesOn(kind, size, t),
    });
  }
}

async function racesOn(kind: StoreKind, size: number, t: Deno.TestContext): Promise<void> {
  await withCluster(
    size,
    async (cluster) => {
      for (let round = 1; round <= 3; round++) {
        await t.step(
          `round ${round}: one authorization code → exactly one 200`,
          () => codeRace(cluster),
        );
        await t.step(
          `round ${round}: one refresh token → exactly one 200`,
          () => refreshRace(cluster),
        );
        await t.step(
          `round ${round}: one approved flow → exactly one complete`,
          () => flowRace(cluster),
        );
      }
    },
    undefined,
    kind,
  );
}

for (const kind of STORE_KINDS) {
  const name = kind === KV_FILE ? "KV" : kind.name;
  Deno.test({
    name: `multiprocess: nothing half-written after the races (${name} inspected after stopping)`,
    ignore: kind.ignore,
    fn: () => nothingHalfWritten(kind),
  });
}

async function nothingHalfWritten(kind: StoreKind): Promise<void> {
  await withCluster(4, async (cluster) => {
    await codeRace(cluster);
    await refreshRace(cluster);
    await flowRace(cluster);
  }, async (store) => {
    const counts = await inspectKv(store);
    // Three sessions (one per sign-in), each holding its one live refresh token; every code
    // was redeemed, every flow completed, every lease released.
    assert.equal(counts.session, 3, JSON.stringify(counts));
    assert.equal(counts.sessionsWithRefreshToken, 3, JSON.stringify(counts));
    assert.equal(counts.code ?? 0, 0, JSON.stringify(counts));
    assert.equal(counts.flow ?? 0, 0, JSON.stringify(counts));
    assert.equal(counts.lease ?? 0, 0, JSON.stringify(counts));
  }, kind);
}
