/**
 * The servers of a bench run as child processes: started pinned to a CPU with their output in a
 * log file, ready once they listen, stopped with SIGTERM (SIGKILL after 15 s), and all stopped
 * together when the run is interrupted.
 */

import { childEnv } from "./commands.ts";
import type { Pinner } from "./machine.ts";
import { sleep, within } from "./timing.ts";

/** A process the bench started. */
export interface Proc {
  name: string;
  pid: number;
  /** The file its stdout and stderr go to. */
  log: string;
  stop(): Promise<void>;
}

/** How to start one process. */
export interface ProcSpec {
  name: string;
  /** The CPU it is pinned to (or CPUs, as taskset lists them). */
  cpu: number | string;
  cmd: string[];
  /** Its environment beside childEnv's. */
  env: Record<string, string>;
  /** It counts as started once this port accepts connections. */
  port: number;
  log: string;
}

/** Starts processes and keeps track of the ones still running. */
export interface ProcessGroup {
  /** Starts a process and waits until it listens; throws (with its log's tail) if it does not. */
  start(spec: ProcSpec): Promise<Proc>;
  /** Stops every process still running. */
  stopAll(): Promise<void>;
}

/** Where a group's processes run and how they are pinned. */
export interface ProcessGroupOptions {
  /** Their working folder. */
  root: string;
  pin: Pinner;
}

/** A Proc that also tells whether it has exited, for the wait until it listens. */
type SpawnedProc = Proc & { exited(): boolean };

const START_TIMEOUT_MS = 180_000;
const STOP_TIMEOUT_MS = 15_000;

/** A group whose processes run in `root`, pinned with `pin`. */
export function createProcessGroup(options: ProcessGroupOptions): ProcessGroup {
  const running = new Set<Proc>();
  return {
    async start(spec) {
      if (await portOpen(spec.port)) throw new Error(`port ${spec.port} is already in use`);
      const proc = spawn(spec, options, running);
      running.add(proc);
      await untilListening(proc, spec.port);
      return proc;
    },
    async stopAll() {
      await Promise.all([...running].map((p) => p.stop()));
    },
  };
}

function spawn(
  spec: ProcSpec,
  options: ProcessGroupOptions,
  running: Set<Proc>,
): SpawnedProc {
  // sh execs taskset which execs the server: the pid we get is the server's.
  const child = new Deno.Command("sh", {
    args: ["-c", 'exec "$@" >"$BENCH_LOG" 2>&1', "sh", ...options.pin(spec.cpu), ...spec.cmd],
    cwd: options.root,
    env: childEnv({ ...spec.env, BENCH_LOG: spec.log }),
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
  const proc: SpawnedProc = {
    name: spec.name,
    pid: child.pid,
    log: spec.log,
    exited: () => exited,
    async stop() {
      running.delete(proc);
      if (exited) return;
      signal(child, "SIGTERM");
      if (!await within(status, STOP_TIMEOUT_MS)) {
        signal(child, "SIGKILL");
        await status;
      }
    },
  };
  return proc;
}

function signal(child: Deno.ChildProcess, name: Deno.Signal): void {
  try {
    child.kill(name);
  } catch { /* gone */ }
}

async function untilListening(proc: SpawnedProc, port: number): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (!await portOpen(port)) {
    if (proc.exited() || Date.now() > deadline) {
      await proc.stop();
      const tail = (await Deno.readTextFile(proc.log).catch(() => "")).split("\n").slice(-15);
      throw new Error(`${proc.name} did not start listening on ${port}:\n${tail.join("\n")}`);
    }
    await sleep(100);
  }
}

async function portOpen(port: number): Promise<boolean> {
  try {
    (await Deno.connect({ hostname: "127.0.0.1", port })).close();
    return true;
  } catch {
    return false;
  }
}
