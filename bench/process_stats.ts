/**
 * CPU time and memory of the measured processes and of the whole machine, read from /proc: a
 * process's utime+stime, its Deno KV thread's share, its RSS now and at its peak, and the
 * machine's busy time (what the noise gate and the "other load" column are made of).
 */

import { runCommand } from "./commands.ts";

/** Deno KV's SQLite thread names start with this. */
const KV_THREAD_PREFIX = "sw-";

/** Clock ticks per second, the unit of /proc's CPU times. */
export async function clockTicksPerSecond(): Promise<number> {
  return Number((await runCommand("getconf", ["CLK_TCK"])).stdout.trim()) || 100;
}

/** utime + stime of a /proc `stat` file (fields 14 and 15), in ticks; throws when it is gone. */
function statTicks(statPath: string): number {
  const stat = Deno.readTextFileSync(statPath);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
}

/** CPU ticks a process used so far (0 when it is gone). */
export function cpuTicks(pid: number): number {
  try {
    return statTicks(`/proc/${pid}/stat`);
  } catch {
    return 0;
  }
}

/** CPU ticks of a process's threads whose name starts with `prefix`. */
export function threadTicks(pid: number, prefix: string): number {
  let total = 0;
  try {
    for (const t of Deno.readDirSync(`/proc/${pid}/task`)) {
      try {
        const comm = Deno.readTextFileSync(`/proc/${pid}/task/${t.name}/comm`).trim();
        if (comm.startsWith(prefix)) total += statTicks(`/proc/${pid}/task/${t.name}/stat`);
      } catch { /* thread gone */ }
    }
  } catch { /* process gone */ }
  return total;
}

/** All CPUs' busy ticks: user nice system irq softirq. */
export function machineBusyTicks(): number {
  const f = Deno.readTextFileSync("/proc/stat").split("\n")[0].trim().split(/\s+/).map(Number);
  return f[1] + f[2] + f[3] + f[6] + f[7];
}

/** A size field of /proc/<pid>/status in KiB (0 when missing or the process is gone). */
function statusKb(pid: number, field: string): number {
  try {
    const line = Deno.readTextFileSync(`/proc/${pid}/status`).split("\n")
      .find((l) => l.startsWith(`${field}:`));
    return line ? Number(line.split(/\s+/)[1]) : 0;
  } catch {
    return 0;
  }
}

/** A process's resident memory now, in KiB. */
export function rssKb(pid: number): number {
  return statusKb(pid, "VmRSS");
}

/** A process's highest resident memory so far (VmHWM), in KiB. */
export function peakRssKb(pid: number): number {
  return statusKb(pid, "VmHWM");
}

/** CPU counters around a measurement: in ticks from sampleCpu, in seconds from cpuSeconds. */
export interface CpuSample {
  /** The server process. */
  server: number;
  /** The processes beside the server that belong to the case (the simulated GitLab). */
  helpers: number;
  /** The server's Deno KV thread (a part of `server`). */
  kvThread: number;
  /** The case's PostgreSQL server processes (0 when the case runs on KV). */
  database: number;
  /** Every CPU of the machine. */
  machine: number;
}

/**
 * Reads the CPU counters of a server, its helpers, its database (`databaseTicks`, already
 * read) and the machine.
 */
export function sampleCpu(
  serverPid: number,
  helperPids: number[],
  databaseTicks = 0,
): CpuSample {
  return {
    server: cpuTicks(serverPid),
    helpers: helperPids.reduce((sum, pid) => sum + cpuTicks(pid), 0),
    kvThread: threadTicks(serverPid, KV_THREAD_PREFIX),
    database: databaseTicks,
    machine: machineBusyTicks(),
  };
}

/** The CPU seconds used between two samples. */
export function cpuSeconds(before: CpuSample, after: CpuSample, ticksPerSecond: number): CpuSample {
  return {
    server: (after.server - before.server) / ticksPerSecond,
    helpers: (after.helpers - before.helpers) / ticksPerSecond,
    kvThread: (after.kvThread - before.kvThread) / ticksPerSecond,
    database: (after.database - before.database) / ticksPerSecond,
    machine: (after.machine - before.machine) / ticksPerSecond,
  };
}
