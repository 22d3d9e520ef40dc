/**
 * What one `deno task bench` run measures and how: the BENCH_* environment variables (listed in
 * bench/run.ts) read into one value, and the fixed names and secrets the bench's processes share.
 */

/** The bench's own folder (ends with a slash). */
export const BENCH_DIR = new URL(".", import.meta.url).pathname;
/** The project's root folder (ends with a slash), where the service is started. */
export const ROOT = new URL("..", import.meta.url).pathname;
/** The JWT secret of the service and the floors. */
export const SECRET = "bench-secret-bench-secret-bench-secret-0123456789";
/** The GitLab application id the service is configured with. */
export const GITLAB_CLIENT_ID = "bench-gitlab-app";
/** The MCP client id of the seeded sessions, which wrk.lua sends. */
export const CLIENT_ID = "bench-client";

/** Every case the bench knows, in the order it runs them by default. */
export const ALL_CASES = [
  "floor-hello",
  "floor-jwt",
  "floor-jwt-kv",
  "floor-jwt-kv-rawkey",
  "refresh",
  "refresh-eddsa",
  "refresh-es256",
  "refresh-pg",
  "code",
  "code-pg",
  "poll",
  "metadata",
  "mcp-direct",
  "gateway",
  "gateway-pg",
  "refresh-2proc",
  "refresh-pg-2proc",
  "floor-proxy-1",
  "floor-proxy",
  "gateway-32",
  "gateway-cold-hs256",
  "gateway-cold-eddsa",
  "gateway-cold-es256",
  "gateway-2proc",
  "gateway-1-server",
  "gateway-50-servers",
] as const;

/** The name of one case of ALL_CASES. */
export type CaseName = typeof ALL_CASES[number];

/** The settings of one run, from the environment. */
export interface BenchConfig {
  /** BENCH_N: sessions seeded for the grant cases (as many with codes). */
  sessions: number;
  /** BENCH_DURATION: measured seconds per case. */
  duration: number;
  /** BENCH_WARMUP: warm-up seconds per case. */
  warmup: number;
  /** BENCH_CONNS: wrk connections. */
  conns: number;
  /** BENCH_THREADS: wrk threads. */
  threads: number;
  /** BENCH_PORT: the servers' port; the simulated GitLab gets the next, the MCP server +2. */
  port: number;
  /** BENCH_COLD_TOKENS: access tokens (each another session's) the gateway-cold cases cycle. */
  coldTokens: number;
  /** BENCH_POLL_FLOWS: flows created for the poll case. */
  pollFlows: number;
  /** BENCH_QUIET_CORES: the machine counts as quiet below this many busy cores. */
  quietCores: number;
  /** BENCH_QUIET_MAX_WAIT: seconds to wait for a quiet machine before measuring anyway. */
  quietMaxWait: number;
  /** BENCH_OTHER_MAX: cores other processes may use during a measurement before it repeats. */
  otherMax: number;
  /** BENCH_RETRIES: how often a noisy measurement repeats. */
  retries: number;
  /** BENCH_SIZES: session counts of the size sweep. */
  sizes: number[];
  /** BENCH_CASES: the cases to run, in this order. */
  cases: CaseName[];
  /** BENCH_SERVICE_ENV: extra environment for the service. */
  serviceEnv: Record<string, string>;
  /** BENCH_NO_PIN=1: do not pin processes to CPUs. */
  noPin: boolean;
  /** BENCH_WRITE_README=0 turns it off: write the tables into bench/README.md. */
  writeReadme: boolean;
  /** BENCH_KEEP=1: keep the temporary folder. */
  keep: boolean;
}

const DEFAULT_SIZES = "10000,100000";

/** Reads the BENCH_* variables; throws on a malformed number or an unknown case. */
export function loadBenchConfig(): BenchConfig {
  return {
    sessions: num("BENCH_N", 100_000),
    duration: num("BENCH_DURATION", 10),
    warmup: num("BENCH_WARMUP", 3),
    conns: num("BENCH_CONNS", 32),
    threads: num("BENCH_THREADS", 2),
    port: num("BENCH_PORT", 18090),
    coldTokens: Math.max(1000, num("BENCH_COLD_TOKENS", 6000)),
    pollFlows: num("BENCH_POLL_FLOWS", 2000),
    quietCores: num("BENCH_QUIET_CORES", 0.25),
    quietMaxWait: num("BENCH_QUIET_MAX_WAIT", 90),
    otherMax: num("BENCH_OTHER_MAX", 0.3),
    retries: num("BENCH_RETRIES", 2),
    sizes: list("BENCH_SIZES", DEFAULT_SIZES).map(Number).filter((n) => n > 0),
    cases: list("BENCH_CASES", ALL_CASES.join(",")).filter(Boolean).map(caseName),
    serviceEnv: keyValues(env("BENCH_SERVICE_ENV", "")),
    noPin: env("BENCH_NO_PIN", "0") === "1",
    writeReadme: env("BENCH_WRITE_README", "1") !== "0",
    keep: env("BENCH_KEEP", "0") === "1",
  };
}

/** An unset or empty variable reads as `fallback`. */
function env(name: string, fallback: string): string {
  return Deno.env.get(name) || fallback;
}

function num(name: string, fallback: number): number {
  const n = Number(env(name, String(fallback)));
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a number`);
  return n;
}

/** A comma list, where "none" is the empty list. */
function list(name: string, fallback: string): string[] {
  const value = env(name, fallback);
  return value === "none" ? [] : value.split(",");
}

function caseName(name: string): CaseName {
  if (!(ALL_CASES as readonly string[]).includes(name)) throw new Error(`unknown case ${name}`);
  return name as CaseName;
}

/** "K=V K=V" as a record. */
function keyValues(text: string): Record<string, string> {
  return Object.fromEntries(
    text.split(/\s+/).filter(Boolean).map((kv) => {
      const i = kv.indexOf("=");
      return [kv.slice(0, i), kv.slice(i + 1)];
    }),
  );
}
