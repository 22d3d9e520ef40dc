/**
 * wrk, the load generator: installing it when missing, running it with bench/wrk.lua against
 * the server under test (pinned to CPU 1, timed by GNU time when there), and reading the RESULT
 * line the script prints.
 */

import { hasCommand, runCommand } from "./commands.ts";
import { say } from "./log.ts";
import type { Pinner } from "./machine.ts";

/** What one wrk run measured. */
export interface WrkResult {
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

/** wrk's connections and threads. */
export interface WrkLoad {
  conns: number;
  threads: number;
}

/**
 * Runs wrk for `seconds` with `load` (the runner's default when omitted); `source` and `mode`
 * go to wrk.lua; `dir` receives GNU time's output.
 */
export type RunWrk = (
  source: string,
  mode: string,
  seconds: number,
  dir: string,
  load?: WrkLoad,
) => Promise<WrkResult>;

/** What every wrk run of a bench shares. */
export interface WrkOptions {
  /** The port of the server under test, on 127.0.0.1. */
  port: number;
  load: WrkLoad;
  pin: Pinner;
  /** GNU time's path, or "" to not measure wrk's own CPU. */
  time: string;
  /** The path of wrk.lua. */
  script: string;
  /** The MCP client id wrk.lua sends. */
  clientId: string;
}

/** Installs wrk with apt-get (through sudo unless root) when it is not on PATH. */
export async function ensureWrk(): Promise<void> {
  if (await hasCommand("wrk")) return;
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
  if (!await hasCommand("wrk")) {
    throw new Error("could not install wrk; install it (apt-get install wrk) and rerun");
  }
}

/** wrk's version line, without its build details. */
export async function wrkVersion(): Promise<string> {
  return (await runCommand("wrk", ["-v"])).stdout.split("\n")[0].split(" [")[0];
}

/** A RunWrk bound to `options`. */
export function wrkRunner(options: WrkOptions): RunWrk {
  return async (source, mode, seconds, dir, load = options.load) => {
    const timeFile = `${dir}/wrk-time.txt`;
    const timer = options.time ? [options.time, "-o", timeFile, "-f", "%U %S %e"] : [];
    const args = [
      ...options.pin(1),
      "wrk",
      `-t${load.threads}`,
      `-c${load.conns}`,
      `-d${seconds}s`,
      "--timeout",
      "10s",
      "--latency",
      "-s",
      options.script,
      `http://127.0.0.1:${options.port}`,
      "--",
      source,
      mode,
      String(load.threads),
    ];
    const all = [...timer, ...args];
    const out = await runCommand(all[0], all.slice(1), {
      env: { BENCH_CLIENT_ID: options.clientId },
    });
    const result = parseResult(out.stdout, out.stderr);
    return options.time ? { ...result, ...await readWrkCpu(timeFile) } : result;
  };
}

/** The RESULT line wrk.lua prints, as numbers. */
function parseResult(stdout: string, stderr: string): WrkResult {
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  if (!line) throw new Error(`wrk gave no RESULT line:\n${stdout}\n${stderr}`);
  const field = (k: string) => line.match(new RegExp(`\\b${k}=(\\S*)`))?.[1] ?? "";
  return {
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
}

/** wrk's CPU seconds and cores from GNU time's "%U %S %e" line. */
async function readWrkCpu(timeFile: string): Promise<Pick<WrkResult, "wrkCpuS" | "wrkCores">> {
  const [u, s, e] = (await Deno.readTextFile(timeFile)).trim().split("\n").pop()!.split(" ")
    .map(Number);
  return { wrkCpuS: u + s, wrkCores: e > 0 ? (u + s) / e : undefined };
}
