/**
 * `deno task bench-seed`: fills a KV file (or a PostgreSQL database) with sessions for the
 * benchmarks, through the service's own storage code (the database main.ts opens with
 * openDatabase, the store it wires with createAppDeps, and its methods), so the keys, encoding
 * and sealing are exactly what `POST /token` reads. The contract is the one of
 * ../shared/bench/README.md:
 *
 * - `KV_PATH`            the KV file to write (required unless `DATABASE_URL` is set)
 * - `DATABASE_URL`       instead of KV_PATH: a fresh PostgreSQL database to write (migrated on
 *                        the way, as the service migrates it)
 * - `JWT_SECRET`, `GITLAB_CLIENT_ID`  as the service is configured (validated like the service)
 * - `BENCH_N`            how many sessions of each kind (default 1000)
 * - `BENCH_REFRESH_OUT`  file that receives one refresh token a line: BENCH_N sessions in the
 *                        "tokens issued" state (spec §3.3), GitLab token expiring in a year
 * - `BENCH_CODES_OUT`    optional: BENCH_N more sessions, each with an issued authorization code
 *                        (S256, redirect URI http://127.0.0.1:9/cb), lines `<code> <verifier>`
 *
 * Optional: `BENCH_SEED_MODE` (`batched`, the default: the store runs on a write-behind KV that
 * lands its commits in the file or database in large batches, see batched_kv.ts; `direct`: the
 * store runs on the file KV (or the database) itself, one fsynced commit per operation, about 4x slower), `BENCH_CLIENT_ID` (the
 * MCP client id in the records, default `bench-client`, as the harness's wrk script sends),
 * `BENCH_CODE_TTL_S` (code lifetime, default 7 days, so that a golden copy outlives a long run),
 * `BENCH_SEED_CONCURRENCY` (default 64), `BENCH_SEED_ROUND` (sessions per batch flush, default
 * 20000), `BENCH_SEED_MAX_S` (gives up after this long, default 3600), `BENCH_RESOURCE` (the
 * MCP server the sessions are for, e.g. `http://127.0.0.1:18090/mcp/bench`; default none: `/mcp`).
 *
 * Each session goes the way the service creates it: a flow (createFlow), completed into a code
 * and a session (completeFlow, as /oauth/poll does), and for "tokens issued" the code redeemed
 * with a fresh refresh token (redeemCode, as the authorization_code grant does).
 */

import { systemClock } from "../src/clock.ts";
import { loadConfig } from "../src/app/config.ts";
import { randomToken, sha256Base64Url } from "../src/crypto.ts";
import type { FlowRecord } from "../src/store/records.ts";
import { newSessionToken } from "../src/store/session_tokens.ts";
import { newSession } from "../src/session/life.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { silentLogger } from "../src/logger.ts";
import type { Store } from "../src/store/mod.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { openDatabase } from "../src/store/open.ts";
import { createBatchedKv } from "./batched_kv.ts";

const REDIRECT_URI = "http://127.0.0.1:9/cb";
const YEAR_MS = 365 * 86_400_000;

interface SeedOptions {
  n: number;
  refreshOut: string;
  codesOut?: string;
  clientId: string;
  /** The resource (RFC 8707) the sessions are for; undefined: `/mcp`. */
  resource?: string;
  codeTtlMs: number;
  concurrency: number;
  /** Sessions per round (batched mode: flushed to the file after each). */
  round: number;
  deadline: number;
}

/** What seeding one session needs from the service's configuration. */
interface Lifetimes {
  accessTokenTtlSeconds: number;
  sessionIdleTtlSeconds: number;
}

function envInt(name: string, fallback: number): number {
  const raw = Deno.env.get(name);
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a whole number, got ${raw}`);
  return n;
}

function flowRecord(clientId: string, codeChallenge: string, now: number): FlowRecord {
  return {
    deviceCode: randomToken(),
    userCode: "BNCH-0000",
    verificationUri: "http://127.0.0.1:9/oauth/device",
    expiresAt: now + 3_600_000,
    intervalSeconds: 5,
    clientId,
    codeChallenge,
    codeChallengeMethod: "S256",
    state: "",
    redirectUri: REDIRECT_URI,
  };
}

/** One session with an issued code, made the way /oauth/poll makes it. Returns the code. */
async function seedCode(
  store: Store,
  opts: SeedOptions,
  life: Lifetimes,
  codeChallenge: string,
  i: number,
): Promise<{ code: string; sessionId: string }> {
  const now = systemClock.now();
  const flowState = randomToken();
  await store.createFlow(flowState, flowRecord(opts.clientId, codeChallenge, now));
  const flow = await store.getFlow(flowState);
  if (!flow) throw new Error("flow vanished after createFlow");
  const sealedTokens = await store.sealUpstreamTokens({
    accessToken: `glpat-bench-${randomToken(15)}`,
    refreshToken: randomToken(),
  });
  const session = newSession(
    flow.value.clientId,
    {
      sealedTokens,
      expiresAt: now + YEAR_MS,
      user: { id: String(100_000 + (i % 1_000_000)), username: `bench-user-${i}` },
    },
    now,
    life.sessionIdleTtlSeconds,
    opts.resource,
  );
  const code = randomToken();
  const ok = await store.completeFlow(flow, {
    code,
    codeRecord: {
      sessionId: session.id,
      clientId: opts.clientId,
      codeChallenge,
      codeChallengeMethod: "S256",
      redirectUri: REDIRECT_URI,
      expiresAt: now + opts.codeTtlMs,
    },
    session,
  });
  if (!ok) throw new Error("completeFlow failed");
  return { code, sessionId: session.id };
}

/** A session in the "tokens issued" state, made the way the code grant makes it. */
async function seedRefresh(
  store: Store,
  opts: SeedOptions,
  life: Lifetimes,
  i: number,
): Promise<string> {
  const verifier = randomToken();
  const { code, sessionId } = await seedCode(
    store,
    opts,
    life,
    sha256Base64Url(verifier),
    i,
  );
  const codeEntry = await store.getCode(code);
  const session = await store.getSession(sessionId);
  if (!codeEntry || !session) throw new Error("code or session vanished after completeFlow");
  const now = systemClock.now();
  const refreshToken = newSessionToken(sessionId);
  const ok = await store.redeemCode(codeEntry, session, {
    ...session.value,
    mcpRefreshTokenHash: sha256Base64Url(refreshToken),
    mcpTokenExpiry: now + life.accessTokenTtlSeconds * 1000,
    updatedAt: now,
    expiresAt: now + life.sessionIdleTtlSeconds * 1000,
  });
  if (!ok) throw new Error("redeemCode failed");
  return refreshToken;
}

/**
 * Runs `task(i)` for i in [0, n) with `concurrency` in flight, in rounds of `round` after each
 * of which `afterRound` runs with nothing in flight; the tasks' lines go to `path`.
 */
async function runAll(
  n: number,
  opts: SeedOptions,
  path: string,
  task: (i: number) => Promise<string>,
  afterRound: () => Promise<unknown>,
): Promise<void> {
  const file = await Deno.open(path, { write: true, create: true, truncate: true });
  const encoder = new TextEncoder();
  try {
    for (let start = 0; start < n; start += opts.round) {
      const end = Math.min(n, start + opts.round);
      const lines: string[] = new Array(end - start);
      let next = start;
      const worker = async () => {
        while (next < end) {
          if (Date.now() > opts.deadline) throw new Error("BENCH_SEED_MAX_S exceeded");
          const i = next++;
          lines[i - start] = await task(i);
        }
      };
      await Promise.all(Array.from({ length: Math.min(opts.concurrency, end - start) }, worker));
      await afterRound();
      const bytes = encoder.encode(lines.join("\n") + "\n");
      for (let off = 0; off < bytes.length;) off += await file.write(bytes.subarray(off));
    }
  } finally {
    file.close();
  }
}

async function main(): Promise<void> {
  const refreshOut = Deno.env.get("BENCH_REFRESH_OUT");
  const config = loadConfig(Deno.env.toObject());
  if ((!config.kvPath && !config.databaseUrl) || !refreshOut) {
    throw new Error(
      "KV_PATH (or DATABASE_URL) and BENCH_REFRESH_OUT are required (see bench/README.md)",
    );
  }
  const target = config.databaseUrl === undefined ? config.kvPath : "the PostgreSQL database";
  const opts: SeedOptions = {
    n: envInt("BENCH_N", 1000),
    refreshOut,
    codesOut: Deno.env.get("BENCH_CODES_OUT") || undefined,
    clientId: Deno.env.get("BENCH_CLIENT_ID") || "bench-client",
    resource: Deno.env.get("BENCH_RESOURCE") || undefined,
    codeTtlMs: envInt("BENCH_CODE_TTL_S", 7 * 86_400) * 1000,
    concurrency: Math.max(1, envInt("BENCH_SEED_CONCURRENCY", 64)),
    round: Math.max(1, envInt("BENCH_SEED_ROUND", 20_000)),
    deadline: Date.now() + envInt("BENCH_SEED_MAX_S", 3600) * 1000,
  };
  const mode = Deno.env.get("BENCH_SEED_MODE") || "batched";
  if (mode !== "batched" && mode !== "direct") {
    throw new Error(`BENCH_SEED_MODE must be batched or direct, got ${mode}`);
  }
  const { database, close } = await openDatabase(config);
  const batched = mode === "batched" ? createBatchedKv(database) : undefined;
  // Wired exactly as main.ts wires it, so secrets are sealed under the service's key.
  const { store } = createAppDeps(config, {
    kv: batched?.kv ?? database,
    clock: systemClock,
    logger: silentLogger,
    templates: await loadTemplates(),
  });
  let flushMs = 0;
  const flush = async () => {
    const t0 = performance.now();
    await batched?.flush();
    flushMs += performance.now() - t0;
  };
  const started = performance.now();
  try {
    await runAll(
      opts.n,
      opts,
      opts.refreshOut,
      (i) => seedRefresh(store, opts, config, i),
      flush,
    );
    const refreshDone = performance.now();
    log(`seeded ${opts.n} refresh sessions in ${secs(refreshDone - started)} s (${mode})`);
    if (opts.codesOut) {
      await runAll(opts.n, opts, opts.codesOut, async (i) => {
        const verifier = randomToken();
        const { code } = await seedCode(store, opts, config, sha256Base64Url(verifier), i);
        return `${code} ${verifier}`;
      }, flush);
      log(`seeded ${opts.n} code sessions in ${secs(performance.now() - refreshDone)} s (${mode})`);
    }
  } finally {
    await close();
  }
  log(
    `bench-seed: done in ${secs(performance.now() - started)} s ` +
      `(of which writing batches ${secs(flushMs)} s) -> ${target}`,
  );
}

function secs(ms: number): string {
  return (ms / 1000).toFixed(1);
}

function log(line: string): void {
  // deno-lint-ignore no-console -- a command-line tool reports progress on stderr
  console.error(line);
}

if (import.meta.main) await main();
