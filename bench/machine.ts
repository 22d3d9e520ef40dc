/** The machine the bench runs on: its CPUs, whether processes can be pinned, what is measured. */

import { hasCommand, runCommand } from "./commands.ts";

/** A command prefix that pins what follows to CPUs (`1`, or a list `0-1`), or nothing when off. */
export type Pinner = (cpus: number | string) => string[];

/** The number of CPUs. */
export function cpuCount(): number {
  return navigator.hardwareConcurrency;
}

/** The CPU's model name from /proc/cpuinfo. */
export function cpuModel(): string {
  return Deno.readTextFileSync("/proc/cpuinfo").match(/model name\s*:\s*(.*)/)?.[1] ??
    "unknown CPU";
}

/** Whether processes get pinned: not turned off, two CPUs at least, and taskset installed. */
export async function canPin(noPin: boolean): Promise<boolean> {
  return !noPin && cpuCount() >= 2 && await hasCommand("taskset");
}

/** The pinning prefix for `enabled`. */
export function pinner(enabled: boolean): Pinner {
  return (cpus) => enabled ? ["taskset", "-c", String(cpus)] : [];
}

/** GNU time's path when installed (it measures wrk's own CPU), else "". */
export async function timeCommand(): Promise<string> {
  return await hasCommand("/usr/bin/time") ? "/usr/bin/time" : "";
}

/** Which code of the service ran: the commit, and whether main.ts or src/ had changes. */
export async function serviceRevision(root: string): Promise<string> {
  const git = (args: string[]) =>
    runCommand("git", args, { cwd: root }).then((out) => out.stdout.trim(), () => undefined);
  const head = await git(["rev-parse", "--short", "HEAD"]);
  const dirty = await git(["status", "--porcelain", "--", "main.ts", "src"]);
  return head ? `commit ${head}${dirty ? " + uncommitted changes" : ""}` : "no git";
}

/** One line naming the CPUs, kernel, deno and wrk (`wrkVersion`) of this run. */
export function machineSummary(wrkVersion: string): string {
  return `${cpuCount()} × ${cpuModel()}, Linux ${Deno.osRelease()}, deno ${Deno.version.deno}, ` +
    `${wrkVersion}`;
}
