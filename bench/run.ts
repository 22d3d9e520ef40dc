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
 * Environment (all optional):
 *   BENCH_N            sessions seeded for the grant cases (default 100000; as many with codes)
 *   BENCH_DURATION     measured seconds per case (default 10)   BENCH_WARMUP  (default 3)
 *   BENCH_CASES        comma list of cases, or "none" (default: all, see ALL_CASES below)
 *   BENCH_SIZES        comma list of session counts for the size sweep, or "none" (default
 *                      10000,100000; 1000000 adds about 6 minutes of seeding, see README)
 *   BENCH_CONNS / BENCH_THREADS  wrk connections / threads (default 32 / 2)
 *   BENCH_PORT         first port to use (default 18090; the simulated GitLab gets the next)
 *   BENCH_POLL_FLOWS   flows created for the poll case (default 2000)
 *   (the mcp-direct and gateway cases use port BENCH_PORT+2 for the bench's MCP server)
 *   BENCH_NO_PIN=1     do not pin with taskset      BENCH_WRITE_README=0  do not touch README
 *   BENCH_QUIET_CORES / BENCH_QUIET_MAX_WAIT / BENCH_OTHER_MAX / BENCH_RETRIES  the noise gate
 *   BENCH_SERVICE_ENV  extra "K=V K=V" for the service    BENCH_KEEP=1  keep the temp dir
 */

const BENCH_DIR = new URL(".", import.meta.url).pathname;
const ROOT = new URL("..", import.meta.url).pathname;
/** The V8 flags `deno task start` gives the service, so that the bench measures that process. */
const START_V8_FLAGS = String(JSON.parse(Deno.readTextFileSync(`${ROOT}deno.json`)).tasks.start)
  .split(" ")
  .filter((arg) => arg.startsWith("--v8-flags="));
const DENO = Deno.execPath();
const SECRET = "bench-secret-bench-secret-bench-secret-0123456789";
const GITLAB_CLIENT_ID = "bench-gitlab-app";
const CLIENT_ID = "bench-client";

const env = (name: string, fallback: string) => Deno.env.get(name) || fallback;
const num = (name: string, fallback: number) => {
  const n = Number(env(name, String(fallback)));
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a number`);
  return n;
};

const N = num("BENCH_N", 100_000);
const DURATION = num("BENCH_DURATION", 10);
const WARMUP = num("BENCH_WARMUP", 3);
const CONNS = num("BENCH_CONNS", 32);
const THREADS = num("BENCH_THREADS", 2);
const PORT = num("BENCH_PORT", 18090);
const POLL_FLOWS = num("BENCH_POLL_FLOWS", 2000);
const QUIET_CORES = num("BENCH_QUIET_CORES", 0.25);
const QUIET_MAX_WAIT = num("BENCH_QUIET_MAX_WAIT", 90);
const OTHER_MAX = num("BENCH_OTHER_MAX", 0.3);
const RETRIES = num("BENCH_RETRIES", 2);
const DEFAULT_SIZES = "10000,100000";
const SIZES = env("BENCH_SIZES", DEFAULT_SIZES) === "none"
  ? []
  : env("BENCH_SIZES", DEFAULT_SIZES).split(",").map(Number).filter((n) => n > 0);
/** The latency cases send one request at a time: their p50 is a request's own latency. */
const LATENCY_LOAD = { conns: 1, threads: 1 };
const ALL_CASES = [
  "floor-hello",
  "floor-jwt-kv",
  "floor-jwt-kv-rawkey",
  "refresh",
  "code",
  "poll",
  "metadata",
  "mcp-direct",
  "gateway",
];
const CASES = env("BENCH_CASES", ALL_CASES.join(",")) === "none"
  ? []
  : env("BENCH_CASES", ALL_CASES.join(",")).split(",").filter(Boolean);
for (const c of CASES) if (!ALL_CASES.includes(c)) throw new Error(`unknown case ${c}`);
const SERVICE_ENV: Record<string, string> = Object.fromEntries(
  env("BENCH_SERVICE_ENV", "").split(/\s+/).filter(Boolean).map((kv) => {
    const i = kv.indexOf("=");
    return [kv.slice(0, i), kv.slice(i + 1)];
  }),
);

// ------------------------------------------------------------------ small helpers

function say(line: string): void {
  // deno-lint-ignore no-console -- progress of a command-line tool
  console.error(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves to true when `promise` settles within `ms`, false otherwise; leaves no timer. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms));
  try {
    return await Promise.race([promise.then(() => true as const), expired]);
  } finally {
    clearTimeout(timer);
  }
}

async function run(cmd: string, args: string[], opts: Deno.CommandOptions = {}) {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped", ...opts })
    .output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

async function has(command: string): Promise<boolean> {
  return (await run("sh", ["-c", `command -v ${command}`])).code === 0;
}

/** The environment children get: only what finding deno and its cache needs, plus `extra`. */
function childEnv(extra: Record<string, string>): Record<string, string> {
  const keep = ["PATH", "HOME", "DENO_DIR", "XDG_CACHE_HOME", "TMPDIR", "NO_COLOR"];
  const base: Record<string, string> = {};
  for (const k of keep) {
    const v = Deno.env.get(k);
    if (v !== undefined) base[k] = v;
  }
  return { ...base, ...extra };
}

// ------------------------------------------------------------------ /proc readings

const CLK_TCK = Number((await run("getconf", ["CLK_TCK"])).stdout.trim()) || 100;

function cpuTicks(pid: number): number {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]); // utime + stime (fields 14, 15)
  } catch {
    return 0;
  }
}

function statusKb(pid: number, field: string): number {
  try {
    const line = Deno.readTextFileSync(`/proc/${pid}/status`).split("\n")
      .find((l) => l.startsWith(`${field}:`));
    return line ? Number(line.split(/\s+/)[1]) : 0;
  } catch {
    return 0;
  }
}

/** CPU ticks of a process's threads whose name starts with `prefix` ("sw-": Deno KV's SQLite). */
function threadTicks(pid: number, prefix: string): number {
  let total = 0;
  try {
    for (const t of Deno.readDirSync(`/proc/${pid}/task`)) {
      try {
        const comm = Deno.readTextFileSync(`/proc/${pid}/task/${t.name}/comm`).trim();
        if (!comm.startsWith(prefix)) continue;
        const stat = Deno.readTextFileSync(`/proc/${pid}/task/${t.name}/stat`);
        const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        total += Number(f[11]) + Number(f[12]);
      } catch { /* thread gone */ }
    }
  } catch { /* process gone */ }
  return total;
}

/** All CPUs' busy ticks: user nice system irq softirq. */
function busyTicks(): number {
  const f = Deno.readTextFileSync("/proc/stat").split("\n")[0].trim().split(/\s+/).map(Number);
  return f[1] + f[2] + f[3] + f[6] + f[7];
}

/** Waits (at most BENCH_QUIET_MAX_WAIT s) until the machine was below QUIET_CORES for 1 s. */
async function waitQuiet(): Promise<number> {
  const started = Date.now();
  while (true) {
    const a = busyTicks();
    await sleep(1000);
    const busy = (busyTicks() - a) / CLK_TCK;
    if (busy < QUIET_CORES) return (Date.now() - started) / 1000;
    if (Date.now() - started > QUIET_MAX_WAIT * 1000) {
      say(`machine still busy (${busy.toFixed(2)} cores) after ${QUIET_MAX_WAIT} s; measuring`);
      return -1;
    }
  }
}

// ------------------------------------------------------------------ machine and tools

const nproc = navigator.hardwareConcurrency;
const PIN = env("BENCH_NO_PIN", "0") !== "1" && nproc >= 2 && await has("taskset");
const pin = (cpu: number) => PIN ? ["taskset", "-c", String(cpu)] : [];
const TIME = await has("/usr/bin/time") ? "/usr/bin/time" : "";

async function ensureWrk(): Promise<void> {
  if (await has("wrk")) return;
  const apt = [
    ...(Deno.uid() === 0 ? [] : ["sudo"]),
    "env",
    "DEBIAN_FRONTEND=noninteractive",
    "apt-get",
  ];
  const aptGet = async (...args: string[]) => {
    say(`running: ${[...apt, ...args].join(" ")}`);
    const { code } = await new Deno.Command(apt[0], {
      args: [...apt.slice(1), ...args],
      stdout: "inherit",
      stderr: "inherit",
    }).output();
    return code === 0;
  };
  say("wrk is not installed; installing it from Debian");
  if (!await aptGet("install", "-y", "wrk")) {
    await aptGet("update");
    await aptGet("install", "-y", "wrk");
  }
  if (!await has("wrk")) {
    throw new Error("could not install wrk; install it (apt-get install wrk) and rerun");
  }
}

// ------------------------------------------------------------------ processes

interface Proc {
  name: string;
  pid: number;
  log: string;
  stop(): Promise<void>;
}
const running = new Set<Proc>();

async function portOpen(port: number): Promise<boolean> {
  try {
    (await Deno.connect({ hostname: "127.0.0.1", port })).close();
    return true;
  } catch {
    return false;
  }
}

/** Starts `cmd` (output to `log`), pinned to `cpu`, and waits until it listens on `port`. */
async function start(
  name: string,
  cpu: number,
  cmd: string[],
  extraEnv: Record<string, string>,
  port: number,
  log: string,
): Promise<Proc> {
  if (await portOpen(port)) throw new Error(`port ${port} is already in use`);
  // sh execs taskset which execs the server: the pid we get is the server's.
  const child = new Deno.Command("sh", {
    args: ["-c", 'exec "$@" >"$BENCH_LOG" 2>&1', "sh", ...pin(cpu), ...cmd],
    cwd: ROOT,
    env: childEnv({ ...extraEnv, BENCH_LOG: log }),
    clearEnv: true,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  let exited = false;
  const status = child.status.then((s) => {
    exited = true;
    return s;
  });
  const proc: Proc = {
    name,
    pid: child.pid,
    log,
    async stop() {
      running.delete(proc);
      if (exited) return;
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
      if (!await within(status, 15_000)) {
        try {
          child.kill("SIGKILL");
        } catch { /* gone */ }
        await status;
      }
    },
  };
  running.add(proc);
  const deadline = Date.now() + 180_000;
  while (!await portOpen(port)) {
    if (exited || Date.now() > deadline) {
      await proc.stop();
      const tail = (await Deno.readTextFile(log).catch(() => "")).split("\n").slice(-15);
      throw new Error(`${name} did not start listening on ${port}:\n${tail.join("\n")}`);
    }
    await sleep(100);
  }
  return proc;
}

async function onInterrupt(): Promise<void> {
  say("interrupted: stopping what this run started");
  await Promise.all([...running].map((p) => p.stop()));
  Deno.exit(130);
}

// ------------------------------------------------------------------ wrk

interface WrkResult {
  requests: number;
  rps: number;
  p50_us: number;
  p99_us: number;
  max_us: number;
  non2xx: number;
  sock_err: number;
  wraps: number;
  statuses: string;
  /** wrk's own CPU, in cores, when /usr/bin/time is there. */
  wrkCores?: number;
  wrkCpuS?: number;
}

async function runWrk(
  source: string,
  mode: string,
  seconds: number,
  dir: string,
  load: { conns: number; threads: number } = { conns: CONNS, threads: THREADS },
): Promise<WrkResult> {
  const timeFile = `${dir}/wrk-time.txt`;
  const timer = TIME ? [TIME, "-o", timeFile, "-f", "%U %S %e"] : [];
  const args = [
    ...pin(1),
    "wrk",
    `-t${load.threads}`,
    `-c${load.conns}`,
    `-d${seconds}s`,
    "--timeout",
    "10s",
    "--latency",
    "-s",
    `${BENCH_DIR}wrk.lua`,
    `http://127.0.0.1:${PORT}`,
    "--",
    source,
    mode,
    String(load.threads),
  ];
  const all = [...timer, ...args];
  const out = await run(all[0], all.slice(1), { env: { BENCH_CLIENT_ID: CLIENT_ID } });
  const line = out.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  if (!line) throw new Error(`wrk gave no RESULT line:\n${out.stdout}\n${out.stderr}`);
  const field = (k: string) => line.match(new RegExp(`\\b${k}=(\\S*)`))?.[1] ?? "";
  const result: WrkResult = {
    requests: Number(field("requests")),
    rps: Number(field("rps")),
    p50_us: Number(field("p50_us")),
    p99_us: Number(field("p99_us")),
    max_us: Number(field("max_us")),
    non2xx: Number(field("non2xx")),
    sock_err: Number(field("sock_err")),
    wraps: Number(field("wraps")),
    statuses: field("statuses"),
  };
  if (TIME) {
    const [u, s, e] = (await Deno.readTextFile(timeFile)).trim().split("\n").pop()!.split(" ")
      .map(Number);
    result.wrkCpuS = u + s;
    result.wrkCores = e > 0 ? (u + s) / e : undefined;
  }
  return result;
}

/** Splits a token file into a warm-up part and a measured part, as the shared harness does. */
async function splitTokens(file: string): Promise<{ warm: string; meas: string }> {
  const lines = (await Deno.readTextFile(file)).split("\n").filter(Boolean);
  const nw = Math.floor(lines.length * WARMUP / (WARMUP + DURATION));
  const warm = `${file}.warm`, meas = `${file}.meas`;
  await Deno.writeTextFile(warm, lines.slice(0, nw).join("\n") + "\n");
  await Deno.writeTextFile(meas, lines.slice(nw).join("\n") + "\n");
  return { warm, meas };
}

// ------------------------------------------------------------------ KV files

const KV_SUFFIXES = ["", "-wal", "-shm"];

/**
 * Copies a seeded KV for one case, then writes every dirty page to disk (`sync`): otherwise
 * the kernel flushes a 1 GiB seed or copy during the measurement and SQLite's fsyncs wait for
 * it, which makes a large KV look slower than it is.
 */
async function copyKv(from: string, to: string): Promise<void> {
  for (const s of KV_SUFFIXES) {
    await Deno.remove(to + s).catch(() => {});
    await Deno.copyFile(from + s, to + s).catch(() => {});
  }
  await run("sync", []);
}

async function removeKv(path: string): Promise<void> {
  for (const s of KV_SUFFIXES) await Deno.remove(path + s).catch(() => {});
}

async function kvBytes(path: string): Promise<number> {
  let total = 0;
  for (const s of KV_SUFFIXES) total += (await Deno.stat(path + s).catch(() => null))?.size ?? 0;
  return total;
}

async function seed(kvPath: string, n: number, refreshOut: string, codesOut = "") {
  const started = performance.now();
  const out = await run(DENO, ["run", "-A", `${BENCH_DIR}seed.ts`], {
    cwd: ROOT,
    clearEnv: true,
    env: childEnv({
      KV_PATH: kvPath,
      JWT_SECRET: SECRET,
      GITLAB_CLIENT_ID,
      BENCH_N: String(n),
      BENCH_REFRESH_OUT: refreshOut,
      BENCH_CODES_OUT: codesOut,
      BENCH_CLIENT_ID: CLIENT_ID,
    }),
  });
  if (out.code !== 0) throw new Error(`seeding failed:\n${out.stderr}`);
  for (const l of out.stderr.trim().split("\n")) say(`  seed: ${l}`);
  return (performance.now() - started) / 1000;
}

// ------------------------------------------------------------------ measuring one case

interface CaseResult extends WrkResult {
  name: string;
  cpuUsPerReq: number;
  /** Of cpuUsPerReq, what Deno KV's SQLite thread used. */
  kvThreadUsPerReq: number;
  peakRssMiB: number;
  idleRssMiB: number;
  otherCores: number;
  quietWaitS: number;
  attempts: number;
  note: string;
  skipped?: boolean;
}

interface Target {
  server: Proc;
  /** Processes beside the server whose CPU is not "other load" (the simulated GitLab). */
  helpers?: Proc[];
  /** Tokens or flow states (mode != get) or the path (mode get). */
  source: string;
  mode: string;
  /** Split the source into warm-up and measured parts (one-shot tokens). */
  split: boolean;
  /** wrk's load when not the default (the latency cases send one request at a time). */
  load?: { conns: number; threads: number };
  note?: string;
  /** Decides before measuring whether the case can run at all; a string skips it. */
  probe?: () => Promise<string | undefined>;
  /** After the servers stopped; gets the requests sent (warm-up + measured), returns a note. */
  cleanup?: (requests: number) => Promise<string | undefined>;
}

async function measure(
  name: string,
  dir: string,
  launch: () => Promise<Target>,
): Promise<CaseResult> {
  for (let attempt = 1;; attempt++) {
    say(`${name}: starting${attempt > 1 ? ` (attempt ${attempt})` : ""}`);
    const t = await launch();
    let result: CaseResult | undefined;
    let extraNote: string | undefined;
    let warmRequests = 0;
    try {
      const skip = await t.probe?.();
      if (skip) {
        say(`${name}: skipped: ${skip}`);
        return skipped(name, skip);
      }
      const parts = t.split ? await splitTokens(t.source) : { warm: t.source, meas: t.source };
      await sleep(500);
      const quiet = await waitQuiet();
      const idle = statusKb(t.server.pid, "VmRSS");
      if (WARMUP > 0) {
        warmRequests = (await runWrk(parts.warm, t.mode, WARMUP, dir, t.load)).requests;
      }
      const helpers = t.helpers ?? [];
      const c0 = cpuTicks(t.server.pid), h0 = helpers.map((h) => cpuTicks(h.pid));
      const k0 = threadTicks(t.server.pid, "sw-");
      const s0 = busyTicks();
      const w = await runWrk(parts.meas, t.mode, DURATION, dir, t.load);
      const c1 = cpuTicks(t.server.pid), h1 = helpers.map((h) => cpuTicks(h.pid));
      const k1 = threadTicks(t.server.pid, "sw-");
      const s1 = busyTicks();
      const hwm = statusKb(t.server.pid, "VmHWM");
      const serverS = (c1 - c0) / CLK_TCK;
      const helperS = h1.reduce((a, x, i) => a + x - h0[i], 0) / CLK_TCK;
      const otherS = Math.max(0, (s1 - s0) / CLK_TCK - serverS - helperS - (w.wrkCpuS ?? 0));
      result = {
        name,
        ...w,
        cpuUsPerReq: w.requests ? serverS * 1e6 / w.requests : 0,
        kvThreadUsPerReq: w.requests ? (k1 - k0) / CLK_TCK * 1e6 / w.requests : 0,
        peakRssMiB: hwm / 1024,
        idleRssMiB: idle / 1024,
        otherCores: otherS / DURATION,
        quietWaitS: quiet,
        attempts: attempt,
        note: t.note ?? "",
      };
    } finally {
      for (const h of t.helpers ?? []) await h.stop();
      await t.server.stop();
      extraNote = await t.cleanup?.(warmRequests + (result?.requests ?? 0));
    }
    if (!result) throw new Error(`${name}: no result`); // (the try block returned or threw)
    if (extraNote) result.note = [result.note, extraNote].filter(Boolean).join("; ");
    if (t.split && result.wraps > 0) result.note += "; INVALID: tokens ran out (wraps)";
    say(
      `${name}: ${result.rps.toFixed(0)} req/s p50=${ms(result.p50_us)} ms ` +
        `p99=${ms(result.p99_us)} ms cpu=${result.cpuUsPerReq.toFixed(0)} µs/req ` +
        `(KV thread ${result.kvThreadUsPerReq.toFixed(0)}) ` +
        `peak=${result.peakRssMiB.toFixed(0)} MiB statuses=${result.statuses} ` +
        `wrk=${result.wrkCores?.toFixed(2) ?? "?"} cores other=${
          result.otherCores.toFixed(2)
        } cores`,
    );
    if (result.otherCores > OTHER_MAX && attempt <= RETRIES) {
      say(`${name}: other processes used ${result.otherCores.toFixed(2)} cores: repeating`);
      continue;
    }
    return result;
  }
}

function skipped(name: string, note: string): CaseResult {
  return {
    name,
    requests: 0,
    rps: 0,
    p50_us: 0,
    p99_us: 0,
    max_us: 0,
    non2xx: 0,
    sock_err: 0,
    wraps: 0,
    statuses: "",
    cpuUsPerReq: 0,
    kvThreadUsPerReq: 0,
    peakRssMiB: 0,
    idleRssMiB: 0,
    otherCores: 0,
    quietWaitS: 0,
    attempts: 1,
    note,
    skipped: true,
  };
}

const ms = (us: number) => (us / 1000).toFixed(us < 10_000 ? 2 : 1);

// ------------------------------------------------------------------ the servers

function serviceEnv(kvPath: string, gitlabUrl: string): Record<string, string> {
  return {
    PORT: String(PORT),
    HOSTNAME: "127.0.0.1",
    KV_PATH: kvPath,
    JWT_SECRET: SECRET,
    GITLAB_CLIENT_ID,
    GITLAB_URL: gitlabUrl,
    ...SERVICE_ENV,
  };
}

function startService(
  dir: string,
  name: string,
  kvPath: string,
  gitlabUrl: string,
  extraEnv: Record<string, string> = {},
) {
  return start(
    name,
    0,
    [DENO, "run", ...START_V8_FLAGS, "-A", "main.ts"],
    { ...serviceEnv(kvPath, gitlabUrl), ...extraEnv },
    PORT,
    `${dir}/${name}.log`,
  );
}

/** The bench's MCP server (bench/mcp_server.ts) on `port`, pinned to `cpu`. */
function startMcpServer(dir: string, cpu: number, port: number) {
  return start(
    `mcp-server-${port}`,
    cpu,
    [DENO, "run", "-A", `${BENCH_DIR}mcp_server.ts`],
    { PORT: String(port) },
    port,
    `${dir}/mcp-server-${port}.log`,
  );
}

/** An access token from the service on PORT, by refreshing the first seeded refresh token. */
async function accessTokenFor(refreshTokens: string): Promise<string | undefined> {
  const file = await Deno.open(refreshTokens);
  const first = (await new Response(file.readable).text()).split("\n", 1)[0];
  const r = await fetch(`http://127.0.0.1:${PORT}/token`, {
    method: "POST",
    body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: first }),
  });
  const body = await r.json().catch(() => ({}));
  return typeof body.access_token === "string" ? body.access_token : undefined;
}

function startFloor(dir: string, name: string, floor: string, keyMode = "cryptokey") {
  return start(
    name,
    0,
    [DENO, "run", "-A", `${BENCH_DIR}floor.ts`],
    {
      PORT: String(PORT),
      HOSTNAME: "127.0.0.1",
      FLOOR: floor,
      KEY_MODE: keyMode,
      KV_PATH: `${dir}/floor-kv.sqlite`,
      JWT_SECRET: SECRET,
    },
    PORT,
    `${dir}/${name}.log`,
  );
}

/** Makes `count` flows through the running service's /authorize; returns their flow states. */
async function createFlows(count: number): Promise<string[]> {
  const states: string[] = [];
  const deadline = Date.now() + 120_000;
  let next = 0;
  const query = new URLSearchParams({
    response_type: "code",
    client_id: CLIENT_ID,
    redirect_uri: "http://127.0.0.1:9/cb",
    code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
    code_challenge_method: "S256",
  });
  const worker = async () => {
    while (next < count && Date.now() < deadline) {
      next++;
      const response = await fetch(`http://127.0.0.1:${PORT}/authorize?${query}`);
      const html = await response.text();
      const state = html.match(/"flowState":"([^"]+)"/)?.[1];
      if (response.status !== 200 || !state) {
        throw new Error(`/authorize answered ${response.status} without a flow state`);
      }
      states.push(state);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  return states;
}

// ------------------------------------------------------------------ main

async function main(): Promise<void> {
  await ensureWrk();
  const wrkVersion = (await run("wrk", ["-v"])).stdout.split("\n")[0].split(" [")[0];
  const cpuModel = Deno.readTextFileSync("/proc/cpuinfo").match(/model name\s*:\s*(.*)/)?.[1] ??
    "unknown CPU";
  const head = (await run("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT }).catch(() => null))
    ?.stdout.trim();
  const dirty = (await run("git", ["status", "--porcelain", "--", "main.ts", "src"], { cwd: ROOT })
    .catch(() => null))?.stdout.trim();
  const revision = head ? `commit ${head}${dirty ? " + uncommitted changes" : ""}` : "no git";
  const started = new Date();
  const stamp = started.toISOString().replace(/[-:]/g, "").replace(/\..*/, "").replace("T", "-");
  const dir = await Deno.makeTempDir({ prefix: "oauth-bench-" });
  const resultsDir = `${BENCH_DIR}results`;
  await Deno.mkdir(resultsDir, { recursive: true });
  say(
    `deno ${Deno.version.deno}, ${wrkVersion}, ${nproc} × ${cpuModel}; pin=${PIN} ` +
      `wrk -t${THREADS} -c${CONNS}, warm-up ${WARMUP} s + ${DURATION} s per case; tmp ${dir}`,
  );

  const golden = `${dir}/golden.sqlite`;
  const rt = `${dir}/refresh-tokens.txt`, codes = `${dir}/codes.txt`;
  let seedS = 0;
  const needsSeed = CASES.some((c) =>
    ["refresh", "code", "poll", "metadata", "gateway"].includes(c)
  );
  if (needsSeed) {
    say(`seeding ${N} sessions with refresh tokens and ${N} with codes`);
    seedS = await seed(golden, N, rt, codes);
  }
  const goldenBytes = needsSeed ? await kvBytes(golden) : 0;
  // Stateless floors ignore the token; they get random ones.
  const randomTokens = `${dir}/random-tokens.txt`;
  await Deno.writeTextFile(
    randomTokens,
    Array.from(
      { length: Math.max(N, 200_000) },
      () =>
        crypto.getRandomValues(new Uint8Array(32)).toBase64({
          alphabet: "base64url",
          omitPadding: true,
        }),
    ).join("\n") + "\n",
  );
  const runKv = `${dir}/run.sqlite`;
  const closedGitLab = "http://127.0.0.1:9";

  const results: CaseResult[] = [];
  for (const name of CASES) {
    switch (name) {
      case "floor-hello":
        results.push(
          await measure(name, dir, async () => ({
            server: await startFloor(dir, name, "hello"),
            source: randomTokens,
            mode: "refresh",
            split: false,
            note: "Deno.serve, fixed JSON",
          })),
        );
        break;
      case "floor-jwt-kv":
      case "floor-jwt-kv-rawkey":
        results.push(
          await measure(name, dir, async () => {
            await removeKv(`${dir}/floor-kv.sqlite`);
            const raw = name.endsWith("rawkey");
            return {
              server: await startFloor(dir, name, "jwt-kv", raw ? "raw" : "cryptokey"),
              source: randomTokens,
              mode: "refresh",
              split: false,
              note: raw
                ? "as floor-jwt-kv, jose imports the raw key per call (= harness floor-jwt-kv-deno)"
                : "form + jose HS256 (key imported once) + 1 KV commit",
            };
          }),
        );
        break;
      case "refresh":
      case "code":
        results.push(
          await measure(name, dir, async () => {
            await copyKv(golden, runKv);
            return {
              server: await startService(dir, name, runKv, closedGitLab),
              source: name === "refresh" ? rt : codes,
              mode: name,
              split: true,
              note: name === "refresh"
                ? "refresh_token grant, one fresh token per request"
                : "authorization_code grant + PKCE S256, one fresh code per request",
            };
          }),
        );
        break;
      case "poll":
        results.push(
          await measure(name, dir, async () => {
            await copyKv(golden, runKv);
            const gitlab = await start(
              "sim-gitlab",
              1,
              [DENO, "run", "-A", `${BENCH_DIR}sim_gitlab.ts`],
              { PORT: String(PORT + 1), GITLAB_CLIENT_ID },
              PORT + 1,
              `${dir}/sim-gitlab.log`,
            );
            const server = await startService(dir, name, runKv, `http://127.0.0.1:${PORT + 1}`);
            const flowsFile = `${dir}/flows.txt`;
            let flows = 0;
            return {
              server,
              helpers: [gitlab],
              source: flowsFile,
              mode: "poll",
              split: false,
              async probe() {
                const states = await createFlows(POLL_FLOWS);
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
          }),
        );
        break;
      case "metadata":
        results.push(
          await measure(name, dir, async () => {
            await copyKv(golden, runKv);
            const path = "/.well-known/oauth-authorization-server";
            return {
              server: await startService(dir, name, runKv, closedGitLab),
              source: path,
              mode: "get",
              split: false,
              note: `GET ${path}`,
              async probe() {
                const r = await fetch(`http://127.0.0.1:${PORT}${path}`);
                await r.body?.cancel();
                return r.status === 404
                  ? `GET ${path} answers 404 (not implemented yet)`
                  : undefined;
              },
            };
          }),
        );
        break;
      case "mcp-direct":
        results.push(
          await measure(name, dir, async () => {
            const target = `${dir}/mcp-direct.txt`;
            await Deno.writeTextFile(target, "/mcp -\n");
            return {
              server: await startMcpServer(dir, 0, PORT),
              source: target,
              mode: "mcp",
              split: false,
              load: LATENCY_LOAD,
              note: "the MCP server alone, one request at a time (the gateway case's baseline)",
            };
          }),
        );
        break;
      case "gateway":
        results.push(
          await measure(name, dir, async () => {
            await copyKv(golden, runKv);
            const mcp = await startMcpServer(dir, 1, PORT + 2);
            const server = await startService(dir, name, runKv, closedGitLab, {
              MCP_UPSTREAM_URL: `http://127.0.0.1:${PORT + 2}/mcp`,
            });
            const target = `${dir}/gateway.txt`;
            return {
              server,
              helpers: [mcp],
              source: target,
              mode: "mcp",
              split: false,
              load: LATENCY_LOAD,
              note: "POST /mcp through the gateway (JWT, session, GitLab token), one at a time",
              async probe() {
                const accessToken = await accessTokenFor(rt);
                if (!accessToken) return "no access token: the refresh grant failed";
                await Deno.writeTextFile(target, `/mcp ${accessToken}\n`);
                const r = await fetch(`http://127.0.0.1:${PORT}/mcp`, {
                  method: "POST",
                  headers: { authorization: `Bearer ${accessToken}` },
                  body: "{}",
                });
                await r.body?.cancel();
                return r.status === 200 ? undefined : `POST /mcp answered ${r.status}`;
              },
              async cleanup(requests) {
                const log = await Deno.readTextFile(mcp.log).catch(() => "");
                const forwarded = Number(log.match(/"withToken":(\d+)/)?.[1] ?? NaN);
                // The probe's request, and wrk's may include one in flight when it stopped.
                const all = forwarded >= requests + 1;
                return `${all ? "every" : `only ${forwarded} of ${requests + 1}`} request` +
                  `${all ? "" : "s"} reached the MCP server with the GitLab token`;
              },
            };
          }),
        );
        break;
    }
  }

  // ---------------------------------------------------------------- size sweep
  interface SizeResult {
    sessions: number;
    seedS: number;
    kvBytes: number;
    result: CaseResult;
  }
  const sizes: SizeResult[] = [];
  for (const n of SIZES) {
    const kv = `${dir}/size-${n}.sqlite`, tokens = `${dir}/size-${n}-rt.txt`;
    say(`size sweep: seeding ${n} sessions`);
    const s = await seed(kv, n, tokens);
    const bytes = await kvBytes(kv);
    const result = await measure(`refresh@${n}`, dir, async () => {
      await copyKv(kv, runKv);
      return {
        server: await startService(dir, `size-${n}`, runKv, closedGitLab),
        source: tokens,
        mode: "chain",
        split: true,
        note: "refresh_token grant, each new token reused once later (chained)",
      };
    });
    sizes.push({ sessions: n, seedS: s, kvBytes: bytes, result });
    await removeKv(kv);
  }

  // ---------------------------------------------------------------- report
  const byName = new Map(results.map((r) => [r.name, r]));
  const ratio = (a: string, b: string) => {
    const x = byName.get(a), y = byName.get(b);
    return x && y && !x.skipped && !y.skipped && y.rps ? x.rps / y.rps : undefined;
  };
  const machine = `${nproc} × ${cpuModel}, Linux ${Deno.osRelease()}, deno ${Deno.version.deno}, ` +
    `${wrkVersion}`;
  const lines: string[] = [];
  lines.push(
    `Measured ${started.toISOString().slice(0, 16).replace("T", " ")} UTC by \`deno task bench\` ` +
      `(service at ${revision}) on ${machine}. ` +
      (PIN ? "Server pinned to CPU 0, wrk (and the simulated GitLab) to CPU 1; " : "Unpinned; ") +
      `wrk ${THREADS} threads, ${CONNS} connections, ${WARMUP} s warm-up + ${DURATION} s ` +
      `measured per case. Service KV: ${N.toLocaleString("en-US")} sessions with refresh tokens ` +
      `+ ${N.toLocaleString("en-US")} with codes (${(goldenBytes / 2 ** 20).toFixed(0)} MiB ` +
      `file, seeded in ${seedS.toFixed(0)} s), a fresh copy per case.`,
  );
  lines.push("");
  lines.push(
    "| case | req/s | p50 ms | p99 ms | server CPU µs/req (KV thread) | peak RSS MiB | " +
      "idle RSS MiB | " +
      "responses | other load (cores) | note |",
  );
  lines.push("|---|---:|---:|---:|---:|---:|---:|---|---:|---|");
  for (const r of results) {
    if (r.skipped) {
      lines.push(`| ${r.name} | – | – | – | – | – | – | – | – | skipped: ${r.note} |`);
      continue;
    }
    lines.push(
      `| ${r.name} | ${Math.round(r.rps).toLocaleString("en-US")} | ${ms(r.p50_us)} | ` +
        `${ms(r.p99_us)} | ${r.cpuUsPerReq.toFixed(0)} (${r.kvThreadUsPerReq.toFixed(0)}) | ` +
        `${r.peakRssMiB.toFixed(0)} | ` +
        `${r.idleRssMiB.toFixed(0)} | ${r.statuses.replaceAll(",", " ")}` +
        `${r.sock_err ? ` (${r.sock_err} socket errors)` : ""} | ${r.otherCores.toFixed(2)} | ` +
        `${r.note} |`,
    );
  }
  const ratios: [string, string][] = [
    ["refresh", "floor-jwt-kv"],
    ["refresh", "floor-jwt-kv-rawkey"],
    ["code", "floor-jwt-kv"],
    ["code", "floor-jwt-kv-rawkey"],
    ["refresh", "floor-hello"],
    ["floor-jwt-kv", "floor-hello"],
  ];
  const ratioText = ratios.map(([a, b]) => [a, b, ratio(a, b)] as const)
    .filter(([, , x]) => x !== undefined)
    .map(([a, b, x]) => `${a} ÷ ${b} = **${x!.toFixed(2)}**`);
  if (ratioText.length) {
    lines.push("");
    lines.push(`Throughput ratios in this run: ${ratioText.join(", ")}.`);
  }
  const direct = byName.get("mcp-direct"), gateway = byName.get("gateway");
  if (direct && gateway && !direct.skipped && !gateway.skipped) {
    const added = (key: "p50_us" | "p99_us") => ms(gateway[key] - direct[key]);
    lines.push("");
    lines.push(
      `Gateway's added latency over a direct call to the MCP server, one request at a time: ` +
        `**${added("p50_us")} ms** at p50, **${added("p99_us")} ms** at p99 ` +
        `(server CPU ${gateway.cpuUsPerReq.toFixed(0)} µs per proxied request).`,
    );
  }
  if (sizes.length) {
    lines.push("");
    lines.push(
      "Refresh at several session counts (a KV with only that many sessions, seeded by " +
        "`bench/seed.ts`; chained refresh tokens so the load can outlast the seeded set):",
    );
    lines.push("");
    lines.push(
      "| sessions | seeding s | KV file MiB | KV bytes/session | idle RSS MiB | peak RSS MiB | " +
        "req/s | server CPU µs/req (KV thread) | p50 ms | p99 ms | responses | other load |",
    );
    lines.push("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|");
    for (const s of sizes) {
      const r = s.result;
      lines.push(
        `| ${s.sessions.toLocaleString("en-US")} | ${s.seedS.toFixed(0)} | ` +
          `${(s.kvBytes / 2 ** 20).toFixed(0)} | ${(s.kvBytes / s.sessions).toFixed(0)} | ` +
          `${r.idleRssMiB.toFixed(0)} | ${r.peakRssMiB.toFixed(0)} | ` +
          `${Math.round(r.rps).toLocaleString("en-US")} | ${r.cpuUsPerReq.toFixed(0)} ` +
          `(${r.kvThreadUsPerReq.toFixed(0)}) | ` +
          `${ms(r.p50_us)} | ${ms(r.p99_us)} | ${r.statuses.replaceAll(",", " ")} | ` +
          `${r.otherCores.toFixed(2)} |`,
      );
    }
    if (sizes.length > 1) {
      const first = sizes[0], last = sizes[sizes.length - 1];
      lines.push("");
      lines.push(
        `Refresh cost ${first.sessions.toLocaleString("en-US")} → ` +
          `${last.sessions.toLocaleString("en-US")} sessions: req/s ×` +
          `${(last.result.rps / first.result.rps).toFixed(2)}, CPU µs/req ×` +
          `${(last.result.cpuUsPerReq / first.result.cpuUsPerReq).toFixed(2)}.`,
      );
    }
  }
  const table = lines.join("\n");
  // deno-lint-ignore no-console -- the report
  console.log(`\n${table}\n`);

  const json = {
    started: started.toISOString(),
    revision,
    machine,
    N,
    DURATION,
    WARMUP,
    results,
    sizes,
  };
  await Deno.writeTextFile(`${resultsDir}/${stamp}.json`, JSON.stringify(json, null, 2) + "\n");
  await Deno.writeTextFile(`${resultsDir}/${stamp}.md`, table + "\n");
  if (env("BENCH_WRITE_README", "1") !== "0") await writeReadme(table);
  say(`results in ${resultsDir}/${stamp}.{md,json}`);
  if (env("BENCH_KEEP", "0") === "1") say(`kept ${dir}`);
  else await Deno.remove(dir, { recursive: true });
}

async function writeReadme(table: string): Promise<void> {
  const path = `${BENCH_DIR}README.md`;
  const start = "<!-- results:start -->", end = "<!-- results:end -->";
  const text = await Deno.readTextFile(path).catch(() => `# Benchmarks\n\n${start}\n${end}\n`);
  const a = text.indexOf(start), b = text.indexOf(end);
  const block = `${start}\n\n${table}\n\n${end}`;
  const next = a >= 0 && b > a
    ? text.slice(0, a) + block + text.slice(b + end.length)
    : `${text.trimEnd()}\n\n${block}\n`;
  await Deno.writeTextFile(path, next);
  // Keep `deno fmt --check` green: the tables are written unaligned.
  await run(DENO, ["fmt", path], { cwd: ROOT });
  say(`wrote the results into ${path}`);
}

if (import.meta.main) {
  Deno.addSignalListener("SIGINT", onInterrupt);
  try {
    await main();
  } finally {
    Deno.removeSignalListener("SIGINT", onInterrupt);
  }
}
