/**
 * Several service processes (`main.ts`) sharing one KV file and one simulated GitLab: races on
 * one authorization code, one refresh token and one completing device flow, spread round-robin
 * over the processes. SQLite answers "database is locked" now and then when processes write at
 * once; the store retries, so exactly one request wins each race and nothing answers 500.
 */

import assert from "node:assert/strict";
import { type SimulatedGitLab, startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { PKCE, TEST_SECRET } from "./_helpers.ts";
import { type ServiceProcess, spawnService } from "./_service.ts";

const PARALLEL = 20;
const REDIRECT_URI = "http://127.0.0.1:9/callback";

interface Result {
  status: number;
  body: Record<string, unknown>;
}

/** A cluster of processes on one KV file, with the GitLab they share. */
interface Cluster {
  gitlab: SimulatedGitLab;
  services: ServiceProcess[];
  urls: string[];
  kvPath: string;
}

async function withCluster(size: number, fn: (cluster: Cluster) => Promise<void>): Promise<void> {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir({ prefix: "multiprocess-" });
  const kvPath = `${dir}/kv.sqlite`;
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "multi-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: kvPath,
  };
  const services: ServiceProcess[] = [];
  let codes: number[] = [];
  try {
    // The first one creates the database; the others open it.
    services.push(await spawnService(env));
    services.push(...await Promise.all(Array.from({ length: size - 1 }, () => spawnService(env))));
    await fn({ gitlab, services, urls: services.map((s) => s.url), kvPath });
  } finally {
    codes = await Promise.all(services.map((service) => service.stop()));
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
  for (const [i, service] of services.entries()) {
    const unhandled = service.logs.filter((line) => line.includes("unhandled error"));
    assert.deepEqual(unhandled, [], `process ${i} logged unhandled errors`);
    const status500 = service.logs.filter((line) => line.includes('"status":500'));
    assert.deepEqual(status500, [], `process ${i} answered 500`);
  }
  assert.deepEqual(codes, codes.map(() => 0), "every process exits cleanly");
}

async function fetchJson(url: string, init?: RequestInit): Promise<Result> {
  const response = await fetch(url, init);
  const text = await response.text();
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(
      `${url} answered ${response.status} with a non-JSON body: ${text.slice(0, 200)}`,
    );
  }
  return { status: response.status, body };
}

function postToken(base: string, form: Record<string, string>): Promise<Result> {
  return fetchJson(`${base}/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form),
  });
}

function pollOnce(base: string, flowState: string): Promise<Result> {
  return fetchJson(`${base}/oauth/poll?flow_state=${encodeURIComponent(flowState)}`);
}

async function authorize(base: string): Promise<string> {
  const query = new URLSearchParams({
    response_type: "code",
    client_id: "multi-client",
    code_challenge: PKCE.challenge,
    code_challenge_method: "S256",
    redirect_uri: REDIRECT_URI,
    state: "st",
  });
  const response = await fetch(`${base}/authorize?${query}`);
  const html = await response.text();
  assert.equal(response.status, 200, html);
  const data = html.match(/<script type="application\/json" id="flow-data"[^>]*>(.*?)<\/script>/s);
  assert.ok(data, "page carries its flow data");
  return JSON.parse(data[1]).flowState;
}

/** Signs in through `urls[0]` (authorize, approve, poll) and returns the code. */
async function issueCode(cluster: Cluster, via = 0): Promise<string> {
  const base = cluster.urls[via % cluster.urls.length];
  const flowState = await authorize(base);
  cluster.gitlab.approve(cluster.gitlab.lastUserCode()!);
  const done = await pollOnce(cluster.urls[(via + 1) % cluster.urls.length], flowState);
  assert.equal(done.status, 200, JSON.stringify(done.body));
  assert.equal(done.body.status, "complete", JSON.stringify(done.body));
  return done.body.code as string;
}

function exchange(base: string, code: string): Promise<Result> {
  return postToken(base, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: REDIRECT_URI,
  });
}

/** Fires `PARALLEL` requests at once, request i to process i mod n. */
function race(cluster: Cluster, request: (base: string) => Promise<Result>): Promise<Result[]> {
  return Promise.all(
    Array.from({ length: PARALLEL }, (_, i) => request(cluster.urls[i % cluster.urls.length])),
  );
}

function assertNo500(results: Result[]): void {
  for (const result of results) {
    assert.ok(result.status < 500, `a ${result.status}: ${JSON.stringify(result.body)}`);
  }
}

/** Exactly one 200, every other answer 400 invalid_grant. */
function assertOneWinner(results: Result[]): Result {
  assertNo500(results);
  const winners = results.filter((result) => result.status === 200);
  assert.equal(winners.length, 1, `200s: ${winners.length} ${JSON.stringify(results)}`);
  for (const loser of results.filter((result) => result.status !== 200)) {
    assert.equal(loser.status, 400, JSON.stringify(loser.body));
    assert.equal(loser.body.error, "invalid_grant", JSON.stringify(loser.body));
  }
  return winners[0];
}

async function codeRace(cluster: Cluster): Promise<void> {
  const code = await issueCode(cluster);
  const winner = assertOneWinner(await race(cluster, (base) => exchange(base, code)));
  assert.equal(typeof winner.body.refresh_token, "string");
  // The code is spent everywhere; the winner's refresh token works on any process.
  assert.equal((await exchange(cluster.urls[1], code)).status, 400);
  const refreshed = await postToken(cluster.urls.at(-1)!, {
    grant_type: "refresh_token",
    refresh_token: winner.body.refresh_token as string,
  });
  assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
}

async function refreshRace(cluster: Cluster): Promise<void> {
  const issued = await exchange(cluster.urls[0], await issueCode(cluster, 1));
  assert.equal(issued.status, 200);
  const refreshToken = issued.body.refresh_token as string;
  const results = await race(
    cluster,
    (base) => postToken(base, { grant_type: "refresh_token", refresh_token: refreshToken }),
  );
  const winner = assertOneWinner(results);
  assert.equal(cluster.gitlab.calls.refresh, 0, "the GitLab token was not expiring");
  const replay = await postToken(cluster.urls[1], {
    grant_type: "refresh_token",
    refresh_token: refreshToken,
  });
  assert.equal(replay.status, 400);
  const next = await postToken(cluster.urls[0], {
    grant_type: "refresh_token",
    refresh_token: winner.body.refresh_token as string,
  });
  assert.equal(next.status, 200, JSON.stringify(next.body));
}

async function flowRace(cluster: Cluster): Promise<void> {
  const flowState = await authorize(cluster.urls[0]);
  const deviceTokenCalls = cluster.gitlab.calls.deviceToken;
  const userCalls = cluster.gitlab.calls.user;
  cluster.gitlab.approve(cluster.gitlab.lastUserCode()!);
  const results = await race(cluster, (base) => pollOnce(base, flowState));
  assertNo500(results);
  const complete = results.filter((result) => result.body.status === "complete");
  assert.equal(complete.length, 1, JSON.stringify(results));
  assert.equal(complete[0].status, 200);
  for (const other of results.filter((result) => result.body.status !== "complete")) {
    const pending = other.status === 200 && other.body.status === "pending";
    const gone = other.status === 400 && other.body.status === "expired" &&
      other.body.error === "Flow not found";
    assert.ok(pending || gone, JSON.stringify(other));
  }
  // GitLab spent the device code once and was asked about the user once.
  assert.equal(cluster.gitlab.calls.deviceToken - deviceTokenCalls, 1);
  assert.equal(cluster.gitlab.calls.user - userCalls, 1);

  const code = complete[0].body.code as string;
  const exchanges = await race(cluster, (base) => exchange(base, code));
  assertOneWinner(exchanges);
  const after = await pollOnce(cluster.urls[1], flowState);
  assert.deepEqual(after, { status: 400, body: { status: "expired", error: "Flow not found" } });
}

/** What is left in the shared KV file once every process has stopped. */
async function inspectKv(kvPath: string): Promise<Record<string, number>> {
  const kv = await Deno.openKv(kvPath);
  try {
    const counts: Record<string, number> = {};
    for await (const entry of kv.list({ prefix: [] })) {
      const kind = String(entry.key[0]);
      counts[kind] = (counts[kind] ?? 0) + 1;
    }
    return counts;
  } finally {
    kv.close();
  }
}

for (const size of [2, 4]) {
  Deno.test(`multiprocess: ${size} processes on one KV file, 20-way races`, async (t) => {
    await withCluster(size, async (cluster) => {
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
    });
  });
}

Deno.test("multiprocess: nothing half-written after the races (KV inspected after stopping)", async () => {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir({ prefix: "multiprocess-" });
  const kvPath = `${dir}/kv.sqlite`;
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "multi-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: kvPath,
  };
  const services = [await spawnService(env)];
  services.push(...await Promise.all([1, 2, 3].map(() => spawnService(env))));
  const cluster: Cluster = { gitlab, services, urls: services.map((s) => s.url), kvPath };
  try {
    await codeRace(cluster);
    await refreshRace(cluster);
    await flowRace(cluster);
  } finally {
    await Promise.all(services.map((service) => service.stop()));
    await gitlab.close();
  }
  try {
    for (const [i, service] of services.entries()) {
      assert.deepEqual(
        service.logs.filter((line) => line.includes("unhandled error")),
        [],
        `process ${i}`,
      );
    }
    const counts = await inspectKv(kvPath);
    // Three sessions (one per sign-in), each with exactly one live refresh token; every code
    // was redeemed, every flow completed, every lease released.
    assert.equal(counts.session, 3, JSON.stringify(counts));
    assert.equal(counts.refresh, 3, JSON.stringify(counts));
    assert.equal(counts.code ?? 0, 0, JSON.stringify(counts));
    assert.equal(counts.flow ?? 0, 0, JSON.stringify(counts));
    assert.equal(counts.lease ?? 0, 0, JSON.stringify(counts));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
