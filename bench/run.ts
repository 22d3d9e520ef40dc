/**
 * `deno task bench`: load test of the service on loopback beside Deno floors, in one run, so
 * that results read as ratios. See bench/README.md for what each case does and how to read it.
 *
 * Installs wrk with apt-get when missing; seeds sessions (bench/seed.ts) into a temporary
 * file-backed KV; starts each server as `deno run -A …` pinned to CPU 0 (wrk and the simulated
 * GitLab on CPU 1) and measures it with wrk: requests/s, latency p50/p99, the server's CPU time
 * per request (utime+stime from /proc) and its peak RSS (VmHWM). Then the same for a refresh
 * load at several session counts (RSS, KV bytes per session, cost flatness). Writes the table
 * into bench/README.md between the results markers, and everything into bench/results/.
 *
 * This file decides what runs, in which order, on which servers; measure.ts measures one case,
 * report.ts writes the tables.
 *
 * Environment (all optional; read by config.ts):
 *   BENCH_N            sessions seeded for the grant cases (default 100000; as many with codes)
 *   BENCH_DURATION     measured seconds per case (default 10)   BENCH_WARMUP  (default 3)
 *   BENCH_CASES        comma list of cases, or "none" (default: all, see ALL_CASES in config.ts)
 *   BENCH_SIZES        comma list of session counts for the size sweep, or "none" (default
 *                      10000,100000; 1000000 adds about 6 minutes of seeding, see README)
 *   BENCH_CONNS / BENCH_THREADS  wrk connections / threads (default 32 / 2)
 *   BENCH_PORT         first port to use (default 18090; the simulated GitLab gets the next)
 *   BENCH_POLL_FLOWS   flows created for the poll case (default 2000)
 *   BENCH_COLD_TOKENS  sessions whose tokens the gateway-cold cases cycle (default 6000, min 1000)
 *   (the mcp-direct and gateway cases use port BENCH_PORT+2 for the bench's MCP server)
 *   BENCH_NO_PIN=1     do not pin with taskset      BENCH_WRITE_README=0  do not touch README
 *   BENCH_QUIET_CORES / BENCH_QUIET_MAX_WAIT / BENCH_OTHER_MAX / BENCH_RETRIES  the noise gate
 *   BENCH_SERVICE_ENV  extra "K=V K=V" for the service    BENCH_KEEP=1  keep the temp dir
 *
 * The `-pg` cases run the service on PostgreSQL (DATABASE_URL) instead: a throwaway cluster on
 * loopback (postgres.ts, pinned to CPU 1 beside wrk, both CPUs for `refresh-pg-2proc`), seeded
 * once with as many sessions through the same seeder, a fresh copy of that database per case,
 * and stopped at the end of the run (also when it fails or is interrupted). Its processes' CPU
 * is measured and reported beside the service's.
 */

import {
  BENCH_DIR,
  type BenchConfig,
  type CaseName,
  CLIENT_ID,
  GITLAB_CLIENT_ID,
  loadBenchConfig,
  ROOT,
  SECRET,
} from "./config.ts";
import { postgresMissing } from "../dev/postgres_cluster.ts";
import { copyKv, kvBytes, removeKv, seedKv, type SeedOptions } from "./kv_files.ts";
import { say } from "./log.ts";
import {
  canPin,
  cpuCount,
  cpuModel,
  machineSummary,
  pinner,
  serviceRevision,
  timeCommand,
} from "./machine.ts";
import {
  type CaseResult,
  type Launch,
  measure,
  type MeasureOptions,
  skipped,
  type Target,
} from "./measure.ts";
import { type BenchPostgres, benchPostgres } from "./postgres.ts";
import { clockTicksPerSecond } from "./process_stats.ts";
import { createProcessGroup, type ProcessGroup } from "./processes.ts";
import { publishReport, type SizeResult } from "./report.ts";
import { createBenchServers, type Servers, type ServiceStore } from "./servers.ts";
import { accessTokenFor, accessTokensFor, createFlows } from "./service_client.ts";
import {
  type AsymmetricAlgorithm,
  generateSigningKey,
  type PrivateSigningJwk,
} from "../src/keys/signing_keys.ts";
import { ensureWrk, type WrkLoad, wrkRunner, wrkVersion } from "./wrk.ts";

/** The latency cases send one request at a time: their p50 is a request's own latency. */
const LATENCY_LOAD = { conns: 1, threads: 1 };
/** The workers of the `-2proc` cases: one per CPU of the 2-CPU bench machine. */
const PARALLEL_WORKERS = 2;
/** The cases that run on the seeded KV. */
const SEEDED_CASES: readonly CaseName[] = [
  "refresh",
  "refresh-2proc",
  "gateway-2proc",
  "code",
  "poll",
  "metadata",
  "gateway",
  "gateway-32",
  "refresh-eddsa",
  "refresh-es256",
  "gateway-cold-hs256",
  "gateway-cold-eddsa",
  "gateway-cold-es256",
];
/** The cases that run on the seeded PostgreSQL database. */
const POSTGRES_CASES: readonly CaseName[] = [
  "refresh-pg",
  "code-pg",
  "gateway-pg",
  "refresh-pg-2proc",
];
/**
 * What wrk.lua's "mcp" mode sends (a 2026-07-28 `tools/call`), also sent once before a gateway
 * case is measured: a gateway refusing it (-32020) fails the case instead of measuring 400s.
 */
const MODERN_TOOL_CALL = {
  headers: {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
    "mcp-name": "echo",
  },
  body: JSON.stringify({
    jsonrpc: "2.0",
    id: 1,
    method: "tools/call",
    params: {
      name: "echo",
      arguments: { text: "hello from wrk" },
      _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28" },
    },
  }),
};
/** How many servers MCP_SERVERS_FILE lists in `gateway-50-servers` (issue 35 §4). */
const SERVERS_MANY = 50;
/** The server the `gateway-*-server(s)` cases call: the last one of their file. */
const SERVERS_CALLED = "bench";
/** Sessions seeded for those cases (their probe refreshes the first one). */
const SERVERS_SESSIONS = 100;
/** The service's GitLab when the case reaches none: a closed port. */
const CLOSED_GITLAB = "http://127.0.0.1:9";
/** Stateless floors ignore the token they get; at least this many random ones. */
const MIN_RANDOM_TOKENS = 200_000;

/** The files of a run, in its temporary folder. */
interface RunFiles {
  dir: string;
  /** The seeded KV every case copies. */
  golden: string;
  refreshTokens: string;
  codes: string;
  /** The tokens and codes of the sessions seeded into PostgreSQL. */
  pgRefreshTokens: string;
  pgCodes: string;
  randomTokens: string;
  /** The copy the service runs on. */
  runKv: string;
  /** The KV of the `gateway-*-server(s)` cases: sessions for `/mcp/bench`, seeded on first use. */
  serversKv: string;
  serversRefreshTokens: string;
}

/** What the cases of a run share. */
interface RunContext {
  config: BenchConfig;
  files: RunFiles;
  servers: Servers;
  /** The PostgreSQL of the `-pg` cases, started when they seed. */
  postgres: BenchPostgres;
  seed: SeedOptions;
  measure: MeasureOptions;
  /** The measured server's address. */
  baseUrl: string;
}

async function main(
  config: BenchConfig,
  processes: ProcessGroup,
  postgres: BenchPostgres,
  pinned: boolean,
) {
  await ensureWrk();
  const version = await wrkVersion();
  const revision = await serviceRevision(ROOT);
  const started = new Date();
  const dir = await Deno.makeTempDir({ prefix: "oauth-bench-" });
  say(
    `deno ${Deno.version.deno}, ${version}, ${cpuCount()} × ${cpuModel()}; pin=${pinned} ` +
      `wrk -t${config.threads} -c${config.conns}, warm-up ${config.warmup} s + ` +
      `${config.duration} s per case; tmp ${dir}`,
  );
  const run = await runContext(config, processes, postgres, pinned, dir);
  const golden = await seedGolden(run);
  const pg = await seedPostgres(run);
  await writeRandomTokens(run.files.randomTokens, Math.max(config.sessions, MIN_RANDOM_TOKENS));

  const launchers = caseLaunchers(run);
  const results: CaseResult[] = [];
  for (const name of config.cases) {
    results.push(
      POSTGRES_CASES.includes(name) && postgresMissing
        ? skipped(name, `no PostgreSQL: ${postgresMissing}`)
        : await measure(run.measure, name, launchers[name]),
    );
  }
  await postgres.stop();
  const sizes = await sizeSweep(run);

  await publishReport(
    {
      started,
      revision,
      machine: machineSummary(version),
      pinned,
      threads: config.threads,
      conns: config.conns,
      warmup: config.warmup,
      duration: config.duration,
      sessions: config.sessions,
      ...golden,
      postgres: pg,
    },
    results,
    sizes,
    {
      resultsDir: `${BENCH_DIR}results`,
      readme: config.writeReadme ? `${BENCH_DIR}README.md` : undefined,
      root: ROOT,
    },
  );
  if (config.keep) say(`kept ${dir}`);
  else await Deno.remove(dir, { recursive: true });
}

async function runContext(
  config: BenchConfig,
  processes: ProcessGroup,
  postgres: BenchPostgres,
  pinned: boolean,
  dir: string,
): Promise<RunContext> {
  const runWrk = wrkRunner({
    port: config.port,
    load: { conns: config.conns, threads: config.threads },
    pin: pinner(pinned),
    time: await timeCommand(),
    script: `${BENCH_DIR}wrk.lua`,
    clientId: CLIENT_ID,
  });
  return {
    config,
    files: {
      dir,
      golden: `${dir}/golden.sqlite`,
      refreshTokens: `${dir}/refresh-tokens.txt`,
      codes: `${dir}/codes.txt`,
      pgRefreshTokens: `${dir}/pg-refresh-tokens.txt`,
      pgCodes: `${dir}/pg-codes.txt`,
      randomTokens: `${dir}/random-tokens.txt`,
      runKv: `${dir}/run.sqlite`,
      serversKv: `${dir}/servers.sqlite`,
      serversRefreshTokens: `${dir}/servers-refresh-tokens.txt`,
    },
    servers: createBenchServers(processes, dir, config.port, config.serviceEnv),
    postgres,
    seed: {
      root: ROOT,
      script: `${BENCH_DIR}seed.ts`,
      secret: SECRET,
      gitlabClientId: GITLAB_CLIENT_ID,
      clientId: CLIENT_ID,
    },
    measure: {
      dir,
      runWrk,
      ticksPerSecond: await clockTicksPerSecond(),
      warmup: config.warmup,
      duration: config.duration,
      quietCores: config.quietCores,
      quietMaxWait: config.quietMaxWait,
      otherMax: config.otherMax,
      retries: config.retries,
    },
    baseUrl: `http://127.0.0.1:${config.port}`,
  };
}

/** Seeds the KV of the grant cases when a chosen case runs on it; its size and seeding time. */
async function seedGolden(run: RunContext): Promise<{ goldenBytes: number; seedS: number }> {
  const { config, files } = run;
  if (!config.cases.some((c) => SEEDED_CASES.includes(c))) return { goldenBytes: 0, seedS: 0 };
  say(`seeding ${config.sessions} sessions with refresh tokens and ${config.sessions} with codes`);
  const seedS = await seedKv(run.seed, {
    store: { kvPath: files.golden },
    n: config.sessions,
    refreshOut: files.refreshTokens,
    codesOut: files.codes,
  });
  return { goldenBytes: await kvBytes(files.golden), seedS };
}

/**
 * Starts PostgreSQL and seeds its template database, when a chosen case runs on it: as many
 * sessions as the KV, through the same seeder. Its version, size and seeding time.
 */
async function seedPostgres(
  run: RunContext,
): Promise<{ version: string; bytes: number; seedS: number } | undefined> {
  const { config, files, postgres } = run;
  if (postgresMissing || !config.cases.some((c) => POSTGRES_CASES.includes(c))) return undefined;
  say(`PostgreSQL: seeding ${config.sessions} sessions with refresh tokens and as many with codes`);
  const seedS = await seedKv(run.seed, {
    store: { databaseUrl: await postgres.templateUrl() },
    n: config.sessions,
    refreshOut: files.pgRefreshTokens,
    codesOut: files.pgCodes,
  });
  return { version: await postgres.version(), bytes: await postgres.templateBytes(), seedS };
}

/** Writes `n` random base64url tokens, one a line. */
async function writeRandomTokens(path: string, n: number): Promise<void> {
  const token = () =>
    crypto.getRandomValues(new Uint8Array(32)).toBase64({
      alphabet: "base64url",
      omitPadding: true,
    });
  await Deno.writeTextFile(path, Array.from({ length: n }, token).join("\n") + "\n");
}

/** How each case starts its servers and what wrk sends them. */
function caseLaunchers(run: RunContext): Record<CaseName, Launch> {
  return {
    "floor-hello": async () => ({
      server: await run.servers.floor("floor-hello", "hello"),
      source: run.files.randomTokens,
      mode: "refresh",
      split: false,
      note: "Deno.serve, fixed JSON",
    }),
    "floor-jwt": async () => ({
      server: await run.servers.floor("floor-jwt", "jwt"),
      source: run.files.randomTokens,
      mode: "refresh",
      split: false,
      note: "form + jose HS256 (key imported once), no storage: the refresh grant's floor",
    }),
    "floor-jwt-kv": () =>
      jwtKvFloor(
        run,
        "floor-jwt-kv",
        "cryptokey",
        "form + jose HS256 (key imported once) + 1 KV commit",
      ),
    "floor-jwt-kv-rawkey": () =>
      jwtKvFloor(
        run,
        "floor-jwt-kv-rawkey",
        "raw",
        "as floor-jwt-kv, jose imports the raw key per call (= harness floor-jwt-kv-deno)",
      ),
    refresh: () =>
      grant(
        run,
        "refresh",
        run.files.refreshTokens,
        "refresh_token grant, one fresh token per request",
      ),
    "refresh-eddsa": () =>
      grant(
        run,
        "refresh",
        run.files.refreshTokens,
        "refresh_token grant, ACCESS_TOKEN_ALG=EdDSA, one fresh token per request",
        signingEnv("EdDSA"),
      ),
    "refresh-es256": () =>
      grant(
        run,
        "refresh",
        run.files.refreshTokens,
        "refresh_token grant, ACCESS_TOKEN_ALG=ES256, one fresh token per request",
        signingEnv("ES256"),
      ),
    code: () =>
      grant(
        run,
        "code",
        run.files.codes,
        "authorization_code grant + PKCE S256, one fresh code per request",
      ),
    poll: () => poll(run),
    metadata: () => metadata(run),
    "mcp-direct": () => mcpDirect(run),
    gateway: () => gateway(run, "gateway", LATENCY_LOAD),
    "floor-proxy": () => proxyFloor(run, "floor-proxy"),
    "floor-proxy-1": () => proxyFloor(run, "floor-proxy-1", LATENCY_LOAD),
    "gateway-32": () => gateway(run, "gateway-32"),
    "gateway-cold-hs256": () => coldGateway(run, "gateway-cold-hs256", {}),
    "gateway-cold-eddsa": () => coldGateway(run, "gateway-cold-eddsa", signingEnv("EdDSA")),
    "gateway-cold-es256": () => coldGateway(run, "gateway-cold-es256", signingEnv("ES256")),
    "refresh-2proc": async () => ({
      server: await parallelServiceOnSeededKv(run, "refresh-2proc", CLOSED_GITLAB),
      source: run.files.refreshTokens,
      mode: "refresh",
      split: true,
      note: `refresh_token grant, deno serve --parallel with ${PARALLEL_WORKERS} workers on one ` +
        "KV file, not pinned (wrk still on CPU 1)",
    }),
    "gateway-2proc": () => gateway(run, "gateway-2proc", undefined, PARALLEL_WORKERS),
    "gateway-1-server": () => gatewayAmongServers(run, "gateway-1-server", 1),
    "gateway-50-servers": () => gatewayAmongServers(run, "gateway-50-servers", SERVERS_MANY),
    "refresh-pg": () =>
      grantOnPostgres(
        run,
        "refresh-pg",
        "refresh",
        run.files.pgRefreshTokens,
        "refresh_token grant on PostgreSQL, one fresh token per request",
      ),
    "code-pg": () =>
      grantOnPostgres(
        run,
        "code-pg",
        "code",
        run.files.pgCodes,
        "authorization_code grant + PKCE S256 on PostgreSQL, one fresh code per request",
      ),
    "gateway-pg": () => gateway(run, "gateway-pg", LATENCY_LOAD, 1, "postgres"),
    "refresh-pg-2proc": async () => ({
      server: await run.servers.parallelService(
        "refresh-pg-2proc",
        PARALLEL_WORKERS,
        await freshPostgres(run, `0-${PARALLEL_WORKERS - 1}`),
        CLOSED_GITLAB,
      ),
      databaseTicks: run.postgres.cpuTicks,
      source: run.files.pgRefreshTokens,
      mode: "refresh",
      split: true,
      note: `refresh_token grant on PostgreSQL, deno serve --parallel with ${PARALLEL_WORKERS} ` +
        "workers (a pool each), service and PostgreSQL not pinned (wrk still on CPU 1)",
    }),
  };
}

/**
 * A fresh copy of the seeded PostgreSQL database, its server moved to `cpus`: CPU 1 beside wrk
 * (as the simulated GitLab) when the service has CPU 0, every CPU for the `-2proc` case.
 */
async function freshPostgres(run: RunContext, cpus: number | string): Promise<ServiceStore> {
  const databaseUrl = await run.postgres.freshCopy();
  await run.postgres.pinTo(cpus);
  return { databaseUrl };
}

/** A token grant on a fresh copy of the seeded PostgreSQL database. */
async function grantOnPostgres(
  run: RunContext,
  name: string,
  mode: "refresh" | "code",
  tokens: string,
  note: string,
): Promise<Target> {
  return {
    server: await run.servers.service(name, await freshPostgres(run, 1), CLOSED_GITLAB),
    databaseTicks: run.postgres.cpuTicks,
    source: tokens,
    mode,
    split: true,
    note,
  };
}

/** The jwt-kv floor on a fresh KV, with the HMAC key imported once or per call. */
async function jwtKvFloor(
  run: RunContext,
  name: CaseName,
  keyMode: "cryptokey" | "raw",
  note: string,
): Promise<Target> {
  await removeKv(run.servers.floorKv);
  return {
    server: await run.servers.floor(name, "jwt-kv", keyMode),
    source: run.files.randomTokens,
    mode: "refresh",
    split: false,
    note,
  };
}

/** A token grant on a fresh copy of the seeded KV, each token or code used once. */
async function grant(
  run: RunContext,
  mode: "refresh" | "code",
  tokens: string,
  note: string,
  env: Promise<Record<string, string>> = Promise.resolve({}),
): Promise<Target> {
  return {
    server: await serviceOnSeededKv(run, mode, await env),
    source: tokens,
    mode,
    split: true,
    note,
  };
}

/** /oauth/poll on pending flows, against the simulated GitLab. */
async function poll(run: RunContext): Promise<Target> {
  await copyKv(run.files.golden, run.files.runKv);
  const gitlab = await run.servers.simulatedGitLab();
  const server = await run.servers.service(
    "poll",
    { kvPath: run.files.runKv },
    `http://127.0.0.1:${run.config.port + 1}`,
  );
  const flowsFile = `${run.files.dir}/flows.txt`;
  let flows = 0;
  return {
    server,
    helpers: [gitlab],
    source: flowsFile,
    mode: "poll",
    split: false,
    async probe() {
      const states = await createFlows(run.baseUrl, CLIENT_ID, run.config.pollFlows);
      flows = states.length;
      await Deno.writeTextFile(flowsFile, states.join("\n") + "\n");
      return states.length ? undefined : "no flow could be created";
    },
    async cleanup(requests) {
      const log = await Deno.readTextFile(gitlab.log).catch(() => "");
      const calls = Number(log.match(/"deviceToken":(\d+)/)?.[1] ?? NaN);
      return `${flows} pending flows (simulated GitLab); ` +
        `${(calls / requests).toFixed(2)} upstream polls per request`;
    },
  };
}

/** The authorization server metadata document. */
async function metadata(run: RunContext): Promise<Target> {
  const path = "/.well-known/oauth-authorization-server";
  return {
    server: await serviceOnSeededKv(run, "metadata"),
    source: path,
    mode: "get",
    split: false,
    note: `GET ${path}`,
    async probe() {
      const r = await fetch(`${run.baseUrl}${path}`);
      await r.body?.cancel();
      return r.status === 404 ? `GET ${path} answers 404 (not implemented yet)` : undefined;
    },
  };
}

/** The MCP server alone, the gateway case's baseline. */
async function mcpDirect(run: RunContext): Promise<Target> {
  const target = `${run.files.dir}/mcp-direct.txt`;
  await Deno.writeTextFile(target, "/mcp -\n");
  return {
    server: await run.servers.mcpServer(0, run.config.port),
    source: target,
    mode: "mcp",
    split: false,
    load: LATENCY_LOAD,
    note: "the MCP server alone, one request at a time (the gateway case's baseline)",
  };
}

/**
 * The gateway's floor: Deno.serve forwarding each POST to the bench's MCP server with fetch and
 * streaming the answer back, no authentication; under the bench's full load (BENCH_CONNS), or
 * one request at a time (`load` LATENCY_LOAD), like the gateway cases.
 */
async function proxyFloor(run: RunContext, name: CaseName, load?: WrkLoad): Promise<Target> {
  const mcpPort = run.config.port + 2;
  const mcp = await run.servers.mcpServer(1, mcpPort);
  const target = `${run.files.dir}/${name}.txt`;
  await Deno.writeTextFile(target, "/mcp -\n");
  const concurrency = load ? "one at a time" : `${run.config.conns} connections`;
  return {
    server: await run.servers.floor(name, "proxy", undefined, {
      UPSTREAM_URL: `http://127.0.0.1:${mcpPort}/mcp`,
    }),
    helpers: [mcp],
    source: target,
    mode: "mcp",
    split: false,
    load,
    note: `Deno.serve + fetch to the MCP server, no authentication, ${concurrency}`,
  };
}

/**
 * POST /mcp through the service to the bench's MCP server: one request at a time (`load`
 * LATENCY_LOAD, for the added latency) or under the bench's full load (for throughput); on a
 * fresh copy of the seeded KV, or of the seeded PostgreSQL database.
 */
async function gateway(
  run: RunContext,
  name: CaseName,
  load?: WrkLoad,
  workers = 1,
  on: "kv" | "postgres" = "kv",
): Promise<Target> {
  const mcpPort = run.config.port + 2;
  const store = on === "postgres"
    ? await freshPostgres(run, 1)
    : (await copyKv(run.files.golden, run.files.runKv), { kvPath: run.files.runKv });
  const refreshTokens = on === "postgres" ? run.files.pgRefreshTokens : run.files.refreshTokens;
  const mcp = await run.servers.mcpServer(1, mcpPort);
  // RATE_LIMIT_MCP off: wrk drives a few sessions at thousands of calls a second.
  const env = { MCP_UPSTREAM_URL: `http://127.0.0.1:${mcpPort}/mcp`, RATE_LIMIT_MCP: "off" };
  const server = workers > 1
    ? await run.servers.parallelService(name, workers, store, CLOSED_GITLAB, env)
    : await run.servers.service(name, store, CLOSED_GITLAB, env);
  const target = `${run.files.dir}/${name}.txt`;
  const concurrency = (load ? "one at a time" : `${run.config.conns} connections`) +
    (workers > 1 ? `, deno serve --parallel with ${workers} workers` : "") +
    (on === "postgres" ? ", on PostgreSQL" : "");
  return {
    server,
    helpers: [mcp],
    databaseTicks: on === "postgres" ? run.postgres.cpuTicks : undefined,
    source: target,
    mode: "mcp",
    split: false,
    load,
    note: `POST /mcp through the gateway (JWT, session, GitLab token), ${concurrency}`,
    async probe() {
      const accessToken = await accessTokenFor(run.baseUrl, refreshTokens);
      if (!accessToken) return "no access token: the refresh grant failed";
      return await probeGateway(run, "/mcp", accessToken, target);
    },
    cleanup: (requests) => gatewayCleanup(mcp.log, server.log, requests),
  };
}

/**
 * POST /mcp/bench through the service to the bench's MCP server, with MCP_SERVERS_FILE listing
 * `count` servers (`bench` last, every other at the same MCP server): what a long list costs a
 * call (issue 35 §4: 50 servers at most 5% more CPU per call than one). Under the bench's full
 * load, on a small KV of sessions for `/mcp/bench`, seeded on the first of these cases.
 */
async function gatewayAmongServers(
  run: RunContext,
  name: CaseName,
  count: number,
): Promise<Target> {
  const mcpPort = run.config.port + 2;
  const resource = `${run.baseUrl}/mcp/${SERVERS_CALLED}`;
  if (!await Deno.stat(run.files.serversRefreshTokens).catch(() => undefined)) {
    await seedKv(run.seed, {
      store: { kvPath: run.files.serversKv },
      n: SERVERS_SESSIONS,
      refreshOut: run.files.serversRefreshTokens,
      resource,
    });
  }
  await copyKv(run.files.serversKv, run.files.runKv);
  const mcpUrl = `http://127.0.0.1:${mcpPort}/mcp`;
  const names = [
    ...Array.from({ length: count - 1 }, (_, i) => `server-${i + 1}`),
    SERVERS_CALLED,
  ];
  const file = `${run.files.dir}/${name}.yaml`;
  await Deno.writeTextFile(
    file,
    `servers:\n${names.map((server) => `  - name: ${server}\n    url: ${mcpUrl}\n`).join("")}`,
  );
  const mcp = await run.servers.mcpServer(1, mcpPort);
  const server = await run.servers.service(name, { kvPath: run.files.runKv }, CLOSED_GITLAB, {
    MCP_SERVERS_FILE: file,
    RATE_LIMIT_MCP: "off",
  });
  const target = `${run.files.dir}/${name}.txt`;
  const path = `/mcp/${SERVERS_CALLED}`;
  return {
    server,
    helpers: [mcp],
    source: target,
    mode: "mcp",
    split: false,
    note: `POST ${path} through the gateway, ${count} server${count > 1 ? "s" : ""} in ` +
      `MCP_SERVERS_FILE (${SERVERS_CALLED} last), ${run.config.conns} connections`,
    async probe() {
      const accessToken = await accessTokenFor(run.baseUrl, run.files.serversRefreshTokens);
      if (!accessToken) return "no access token: the refresh grant failed";
      return await probeGateway(run, path, accessToken, target);
    },
    cleanup: (requests) => gatewayCleanup(mcp.log, server.log, requests),
  };
}

/**
 * Writes wrk's target (`path` and the token) and sends the call once: a gateway refusing it
 * fails the case (its message) instead of measuring refusals.
 */
async function probeGateway(
  run: RunContext,
  path: string,
  accessToken: string,
  target: string,
): Promise<string | undefined> {
  await Deno.writeTextFile(target, `${path} ${accessToken}\n`);
  const r = await fetch(`${run.baseUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${accessToken}`, ...MODERN_TOOL_CALL.headers },
    body: MODERN_TOOL_CALL.body,
  });
  await r.body?.cancel();
  return r.status === 200 ? undefined : `POST ${path} answered ${r.status}`;
}

/** The note's end: whether every request reached the MCP server, and the audit lines written. */
async function gatewayCleanup(mcpLog: string, serviceLog: string, requests: number) {
  const log = await Deno.readTextFile(mcpLog).catch(() => "");
  const forwarded = Number(log.match(/"withToken":(\d+)/)?.[1] ?? NaN);
  // The probe's request, and wrk's may include one in flight when it stopped.
  const all = forwarded >= requests + 1;
  return `${all ? "every" : `only ${forwarded} of ${requests + 1}`} request` +
    `${all ? "" : "s"} reached the MCP server with the GitLab token; ` +
    `${await auditLines(serviceLog)} audit lines in the service's log`;
}

/**
 * The audit lines (`"message":"mcp"`, one per proxied message) the service wrote to its log: the
 * gateway cases measure with them written, as production runs.
 */
async function auditLines(log: string): Promise<number> {
  const text = await Deno.readTextFile(log).catch(() => "");
  return text.split('"message":"mcp"').length - 1;
}

/** The service on a fresh copy of the seeded KV, with no GitLab to reach. */
async function serviceOnSeededKv(run: RunContext, name: string, env: Record<string, string> = {}) {
  await copyKv(run.files.golden, run.files.runKv);
  return await run.servers.service(name, { kvPath: run.files.runKv }, CLOSED_GITLAB, env);
}

/** One signing key per algorithm and run, made on first use. */
const signingKeys = new Map<AsymmetricAlgorithm, Promise<PrivateSigningJwk>>();

/** The service's environment for access tokens signed with `algorithm` (the run's key). */
async function signingEnv(algorithm: AsymmetricAlgorithm): Promise<Record<string, string>> {
  let key = signingKeys.get(algorithm);
  if (!key) signingKeys.set(algorithm, key = generateSigningKey(algorithm, new Date()));
  return { ACCESS_TOKEN_ALG: algorithm, SIGNING_KEYS: JSON.stringify([await key]) };
}

/**
 * POST /mcp through the service under the bench's full load, each request with the token of
 * another session: BENCH_COLD_TOKENS (at least 1,000) access tokens got by refreshing as many
 * seeded sessions, cycled, so that the gateway's one-second memory of verified tokens never
 * answers while fewer calls than tokens are made a second (the note says so). Every call
 * verifies the signature, reads the session and opens its GitLab token.
 */
async function coldGateway(
  run: RunContext,
  name: CaseName,
  env: Record<string, string> | Promise<Record<string, string>>,
): Promise<Target> {
  const mcpPort = run.config.port + 2;
  await copyKv(run.files.golden, run.files.runKv);
  const mcp = await run.servers.mcpServer(1, mcpPort);
  const server = await run.servers.service(name, { kvPath: run.files.runKv }, CLOSED_GITLAB, {
    MCP_UPSTREAM_URL: `http://127.0.0.1:${mcpPort}/mcp`,
    RATE_LIMIT_MCP: "off",
    ...await env,
  });
  const target = `${run.files.dir}/${name}.txt`;
  const count = run.config.coldTokens;
  const algorithm = (await env).ACCESS_TOKEN_ALG ?? "HS256";
  return {
    server,
    helpers: [mcp],
    source: target,
    mode: "mcpcold",
    split: false,
    note: `POST /mcp through the gateway, ${algorithm}, ${count} sessions' tokens cycling ` +
      `(another session's token each request), ${run.config.conns} connections`,
    async probe() {
      const tokens = await accessTokensFor(run.baseUrl, run.files.refreshTokens, 0, count);
      await Deno.writeTextFile(target, tokens.map((t) => `/mcp ${t}`).join("\n") + "\n");
      return await probeGateway(run, "/mcp", tokens[0], `${target}.probe`);
    },
    cleanup: async (requests) =>
      `${await gatewayCleanup(mcp.log, server.log, requests)}; ` +
      `${(requests / (run.config.warmup + run.config.duration)).toFixed(0)} calls/s over ` +
      `${count} tokens (the memory answers none while below)`,
  };
}

/** `deno serve --parallel` on a fresh copy of the seeded KV. */
async function parallelServiceOnSeededKv(run: RunContext, name: string, gitlabUrl: string) {
  await copyKv(run.files.golden, run.files.runKv);
  return await run.servers.parallelService(
    name,
    PARALLEL_WORKERS,
    { kvPath: run.files.runKv },
    gitlabUrl,
  );
}

/** The chained refresh load on KVs of each BENCH_SIZES session count. */
async function sizeSweep(run: RunContext): Promise<SizeResult[]> {
  const sizes: SizeResult[] = [];
  for (const n of run.config.sizes) {
    const kv = `${run.files.dir}/size-${n}.sqlite`, tokens = `${run.files.dir}/size-${n}-rt.txt`;
    say(`size sweep: seeding ${n} sessions`);
    const seedS = await seedKv(run.seed, { store: { kvPath: kv }, n, refreshOut: tokens });
    const bytes = await kvBytes(kv);
    const result = await measure(run.measure, `refresh@${n}`, async () => {
      await copyKv(kv, run.files.runKv);
      return {
        server: await run.servers.service(`size-${n}`, { kvPath: run.files.runKv }, CLOSED_GITLAB),
        source: tokens,
        mode: "chain",
        split: true,
        note: "refresh_token grant, each new token reused once later (chained)",
      };
    });
    sizes.push({ sessions: n, seedS, kvBytes: bytes, result });
    await removeKv(kv);
  }
  return sizes;
}

if (import.meta.main) {
  const config = loadBenchConfig();
  const pinned = await canPin(config.noPin);
  const processes = createProcessGroup({ root: ROOT, pin: pinner(pinned) });
  const postgres = benchPostgres(pinner(pinned));
  const onInterrupt = async () => {
    say("interrupted: stopping what this run started");
    await processes.stopAll();
    await postgres.stop();
    Deno.exit(130);
  };
  Deno.addSignalListener("SIGINT", onInterrupt);
  try {
    await main(config, processes, postgres, pinned);
  } finally {
    Deno.removeSignalListener("SIGINT", onInterrupt);
    await processes.stopAll();
    await postgres.stop();
  }
}
