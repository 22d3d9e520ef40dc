/**
 * Measuring one case: start its servers, let it decide whether it can run, wait for a quiet
 * machine, warm up, then load it with wrk while sampling the server's CPU time and memory; stop
 * everything, and repeat when other processes loaded the machine meanwhile.
 */

import { ms } from "./format.ts";
import { say } from "./log.ts";
import { waitQuiet } from "./noise_gate.ts";
import { cpuSeconds, peakRssKb, rssKb, sampleCpu } from "./process_stats.ts";
import type { Proc } from "./processes.ts";
import { sleep } from "./timing.ts";
import type { RunWrk, WrkLoad, WrkResult } from "./wrk.ts";

/** What one case measured. */
export interface CaseResult extends WrkResult {
  name: string;
  cpuUsPerReq: number;
  /** Of cpuUsPerReq, what Deno KV's SQLite thread used. */
  kvThreadUsPerReq: number;
  /** The PostgreSQL server's CPU (all its processes) per request, for the cases on it. */
  databaseUsPerReq?: number;
  peakRssMiB: number;
  idleRssMiB: number;
  otherCores: number;
  quietWaitS: number;
  attempts: number;
  note: string;
  skipped?: boolean;
}

/** A case's running servers and what wrk sends them. */
export interface Target {
  server: Proc;
  /** Processes beside the server whose CPU is not "other load" (the simulated GitLab). */
  helpers?: Proc[];
  /** The CPU ticks so far of the database the service runs on, when not a KV in its process. */
  databaseTicks?: () => number;
  /** Tokens or flow states (mode != get) or the path (mode get). */
  source: string;
  mode: string;
  /** Split the source into warm-up and measured parts (one-shot tokens). */
  split: boolean;
  /** wrk's load when not the default (the latency cases send one request at a time). */
  load?: WrkLoad;
  note?: string;
  /** Decides before measuring whether the case can run at all; a string skips it. */
  probe?: () => Promise<string | undefined>;
  /** After the servers stopped; gets the requests sent (warm-up + measured), returns a note. */
  cleanup?: (requests: number) => Promise<string | undefined>;
}

/** Starts a case's servers (again on each attempt). */
export type Launch = () => Promise<Target>;

/** What every measurement of a run shares. */
export interface MeasureOptions {
  /** The folder for the token splits and wrk's timing. */
  dir: string;
  runWrk: RunWrk;
  ticksPerSecond: number;
  /** Seconds of warm-up and of measurement. */
  warmup: number;
  duration: number;
  quietCores: number;
  quietMaxWait: number;
  /** Other processes' cores above which a measurement repeats, at most `retries` times. */
  otherMax: number;
  retries: number;
}

/** Measures the case `name`. */
export async function measure(
  options: MeasureOptions,
  name: string,
  launch: Launch,
): Promise<CaseResult> {
  for (let attempt = 1;; attempt++) {
    say(`${name}: starting${attempt > 1 ? ` (attempt ${attempt})` : ""}`);
    const result = await attemptOnce(options, name, attempt, await launch());
    if (result.skipped) return result;
    say(progressLine(result));
    if (result.otherCores > options.otherMax && attempt <= options.retries) {
      say(`${name}: other processes used ${result.otherCores.toFixed(2)} cores: repeating`);
      continue;
    }
    return result;
  }
}

async function attemptOnce(
  options: MeasureOptions,
  name: string,
  attempt: number,
  t: Target,
): Promise<CaseResult> {
  let result: CaseResult | undefined;
  let extraNote: string | undefined;
  let warmRequests = 0;
  try {
    const skip = await t.probe?.();
    if (skip) {
      say(`${name}: skipped: ${skip}`);
      return skipped(name, skip);
    }
    const parts = t.split
      ? await splitTokens(t.source, options.warmup, options.duration)
      : { warm: t.source, meas: t.source };
    await sleep(500);
    const quiet = await waitQuiet({
      quietCores: options.quietCores,
      maxWaitS: options.quietMaxWait,
      ticksPerSecond: options.ticksPerSecond,
    });
    const idle = rssKb(t.server.pid);
    if (options.warmup > 0) {
      warmRequests = (await options.runWrk(parts.warm, t.mode, options.warmup, options.dir, t.load))
        .requests;
    }
    const helperPids = (t.helpers ?? []).map((h) => h.pid);
    const before = sampleCpu(t.server.pid, helperPids, t.databaseTicks?.());
    const w = await options.runWrk(parts.meas, t.mode, options.duration, options.dir, t.load);
    const after = sampleCpu(t.server.pid, helperPids, t.databaseTicks?.());
    const hwm = peakRssKb(t.server.pid);
    const used = cpuSeconds(before, after, options.ticksPerSecond);
    const otherS = Math.max(
      0,
      used.machine - used.server - used.helpers - used.database - (w.wrkCpuS ?? 0),
    );
    result = {
      name,
      ...w,
      cpuUsPerReq: w.requests ? used.server * 1e6 / w.requests : 0,
      kvThreadUsPerReq: w.requests ? used.kvThread * 1e6 / w.requests : 0,
      databaseUsPerReq: t.databaseTicks && w.requests
        ? used.database * 1e6 / w.requests
        : undefined,
      peakRssMiB: hwm / 1024,
      idleRssMiB: idle / 1024,
      otherCores: otherS / options.duration,
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
  return result;
}

/** The progress line of one measured case. */
function progressLine(result: CaseResult): string {
  return `${result.name}: ${result.rps.toFixed(0)} req/s p50=${ms(result.p50_us)} ms ` +
    `p99=${ms(result.p99_us)} ms cpu=${result.cpuUsPerReq.toFixed(0)} µs/req ` +
    `(KV thread ${result.kvThreadUsPerReq.toFixed(0)}) ` +
    (result.databaseUsPerReq === undefined
      ? ""
      : `PostgreSQL=${result.databaseUsPerReq.toFixed(0)} µs/req `) +
    `peak=${result.peakRssMiB.toFixed(0)} MiB statuses=${result.statuses} ` +
    `wrk=${result.wrkCores?.toFixed(2) ?? "?"} cores other=${result.otherCores.toFixed(2)} cores`;
}

/** Splits a token file into a warm-up part and a measured part, as the shared harness does. */
async function splitTokens(
  file: string,
  warmup: number,
  duration: number,
): Promise<{ warm: string; meas: string }> {
  const lines = (await Deno.readTextFile(file)).split("\n").filter(Boolean);
  const nw = Math.floor(lines.length * warmup / (warmup + duration));
  const warm = `${file}.warm`, meas = `${file}.meas`;
  await Deno.writeTextFile(warm, lines.slice(0, nw).join("\n") + "\n");
  await Deno.writeTextFile(meas, lines.slice(nw).join("\n") + "\n");
  return { warm, meas };
}

/** The result of a case that could not run, with why. */
export function skipped(name: string, note: string): CaseResult {
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
