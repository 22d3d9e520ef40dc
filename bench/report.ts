/**
 * The report of a run: the markdown tables (cases, throughput ratios, gateway latency, size
 * sweep), printed on stdout, written with the raw numbers into bench/results/<stamp>.{md,json},
 * and into bench/README.md between the results markers (writeReadme: that file, those markers,
 * nothing else).
 */

import { count, ms } from "./format.ts";
import { say } from "./log.ts";
import type { CaseResult } from "./measure.ts";

/** The refresh case measured on a KV of `sessions` sessions. */
export interface SizeResult {
  sessions: number;
  seedS: number;
  kvBytes: number;
  result: CaseResult;
}

/** How and where a run measured, for the report's first paragraph and the JSON. */
export interface RunInfo {
  started: Date;
  /** The service's code: serviceRevision's answer. */
  revision: string;
  /** CPUs, kernel, deno and wrk versions. */
  machine: string;
  pinned: boolean;
  threads: number;
  conns: number;
  warmup: number;
  duration: number;
  /** Sessions seeded for the grant cases (as many with codes). */
  sessions: number;
  /** The seeded KV's size and how long seeding it took. */
  goldenBytes: number;
  seedS: number;
  /** The `-pg` cases' PostgreSQL: its version, seeded database's size, seeding time. */
  postgres?: { version: string; bytes: number; seedS: number };
}

/** Where the report goes. */
export interface ReportTargets {
  resultsDir: string;
  /** bench/README.md, or undefined to leave it alone. */
  readme?: string;
  /** The project root, where `deno fmt` runs on the README. */
  root: string;
}

/** The pairs of cases whose throughput ratio the report gives, when both ran. */
const RATIOS: [string, string][] = [
  ["refresh", "floor-jwt"],
  ["refresh", "floor-jwt-kv"],
  ["refresh", "floor-jwt-kv-rawkey"],
  ["code", "floor-jwt-kv"],
  ["code", "floor-jwt-kv-rawkey"],
  ["refresh", "floor-hello"],
  ["floor-jwt-kv", "floor-hello"],
  ["gateway-32", "floor-proxy"],
  ["refresh-2proc", "refresh"],
  ["gateway-2proc", "gateway-32"],
  ["refresh-pg", "refresh"],
  ["code-pg", "code"],
  ["gateway-pg", "gateway"],
  ["refresh-pg-2proc", "refresh-pg"],
];

/** Issue 25 §3's targets for the store on PostgreSQL. */
const PG_TARGETS = {
  /** refresh-pg ÷ refresh at least. */
  refreshRatio: 0.5,
  /** refresh-pg-2proc ÷ refresh-pg at least. */
  twoProcessRatio: 1.3,
  /** Peak RSS of one service process on PostgreSQL, at most (MiB). */
  peakRssMiB: 150,
};
/** Issue 35 §4: a call costs at most this much more server CPU with 50 servers than with one. */
const SERVERS_CPU_RATIO = 1.05;
/** The one-process cases on PostgreSQL, whose peak RSS the target bounds. */
const PG_ONE_PROCESS = ["refresh-pg", "code-pg", "gateway-pg"];

const MiB = 2 ** 20;

/** Prints the report and writes it into the results folder and (when asked) the README. */
export async function publishReport(
  info: RunInfo,
  results: CaseResult[],
  sizes: SizeResult[],
  targets: ReportTargets,
): Promise<void> {
  const table = renderReport(info, results, sizes);
  // deno-lint-ignore no-console -- the report
  console.log(`\n${table}\n`);
  const stamp = fileStamp(info.started);
  const json = {
    started: info.started.toISOString(),
    revision: info.revision,
    machine: info.machine,
    N: info.sessions,
    DURATION: info.duration,
    WARMUP: info.warmup,
    results,
    sizes,
  };
  await Deno.mkdir(targets.resultsDir, { recursive: true });
  const base = `${targets.resultsDir}/${stamp}`;
  await Deno.writeTextFile(`${base}.json`, JSON.stringify(json, null, 2) + "\n");
  await Deno.writeTextFile(`${base}.md`, table + "\n");
  if (targets.readme) await writeReadme(targets.readme, table, targets.root);
  say(`results in ${base}.{md,json}`);
}

/** The report as markdown. */
export function renderReport(info: RunInfo, results: CaseResult[], sizes: SizeResult[]): string {
  const sections = [
    [runParagraph(info)],
    caseTable(results),
    ratioLines(results),
    postgresLines(info, results),
    gatewayLines(results),
    serversLines(results),
    sizeLines(sizes),
  ].filter((section) => section.length);
  return sections.map((section) => section.join("\n")).join("\n\n");
}

/** `20261123-120200` for a run started 2026-11-23 12:02:00 UTC. */
function fileStamp(started: Date): string {
  return started.toISOString().replace(/[-:]/g, "").replace(/\..*/, "").replace("T", "-");
}

function runParagraph(info: RunInfo): string {
  return `Measured ${info.started.toISOString().slice(0, 16).replace("T", " ")} UTC by ` +
    `\`deno task bench\` (service at ${info.revision}) on ${info.machine}. ` +
    (info.pinned
      ? "Server pinned to CPU 0, wrk (and the simulated GitLab) to CPU 1; "
      : "Unpinned; ") +
    `wrk ${info.threads} threads, ${info.conns} connections, ${info.warmup} s warm-up + ` +
    `${info.duration} s measured per case. Service KV: ${count(info.sessions)} sessions with ` +
    `refresh tokens + ${count(info.sessions)} with codes ` +
    `(${(info.goldenBytes / MiB).toFixed(0)} MiB file, seeded in ${info.seedS.toFixed(0)} s), ` +
    `a fresh copy per case.` +
    (info.postgres
      ? ` The \`-pg\` cases: the same number of sessions seeded into PostgreSQL ` +
        `${info.postgres.version} on loopback (durable defaults; ` +
        `${(info.postgres.bytes / MiB).toFixed(0)} MiB database, seeded in ` +
        `${info.postgres.seedS.toFixed(0)} s), a fresh \`CREATE DATABASE … TEMPLATE\` copy per ` +
        `case, the server pinned to CPU 1 beside wrk (both CPUs for \`refresh-pg-2proc\`).`
      : "");
}

function caseTable(results: CaseResult[]): string[] {
  const lines = [
    "| case | req/s | p50 ms | p99 ms | server CPU µs/req (KV thread) | PostgreSQL CPU µs/req | " +
    "peak RSS MiB | idle RSS MiB | responses | other load (cores) | note |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
  ];
  for (const r of results) {
    if (r.skipped) {
      lines.push(`| ${r.name} | – | – | – | – | – | – | – | – | – | skipped: ${r.note} |`);
      continue;
    }
    lines.push(
      `| ${r.name} | ${count(Math.round(r.rps))} | ${ms(r.p50_us)} | ${ms(r.p99_us)} | ` +
        `${cpuCell(r)} | ${r.databaseUsPerReq?.toFixed(0) ?? "–"} | ` +
        `${r.peakRssMiB.toFixed(0)} | ${r.idleRssMiB.toFixed(0)} | ` +
        `${responsesCell(r)}${r.sock_err ? ` (${r.sock_err} socket errors)` : ""} | ` +
        `${r.otherCores.toFixed(2)} | ${r.note} |`,
    );
  }
  return lines;
}

/** The results by case name (the last one, should a case have run twice). */
function resultsByName(results: CaseResult[]): Map<string, CaseResult> {
  return new Map(results.map((r) => [r.name, r]));
}

function ratioLines(results: CaseResult[]): string[] {
  const byName = resultsByName(results);
  const ratio = (a: string, b: string) => {
    const x = byName.get(a), y = byName.get(b);
    return x && y && !x.skipped && !y.skipped && y.rps ? x.rps / y.rps : undefined;
  };
  const ratioText = RATIOS.map(([a, b]) => [a, b, ratio(a, b)] as const)
    .filter(([, , x]) => x !== undefined)
    .map(([a, b, x]) => `${a} ÷ ${b} = **${x!.toFixed(2)}**`);
  return ratioText.length ? [`Throughput ratios in this run: ${ratioText.join(", ")}.`] : [];
}

/**
 * Issue 25 §3's targets, as this run measured them, and where each `-pg` case's CPU went: the
 * service, PostgreSQL and wrk share the machine's CPUs.
 */
function postgresLines(info: RunInfo, results: CaseResult[]): string[] {
  const byName = resultsByName(results);
  const ran = results.filter((r) => r.databaseUsPerReq !== undefined && !r.skipped);
  if (!ran.length) return [];
  const rps = (name: string) => {
    const r = byName.get(name);
    return r && !r.skipped ? r.rps : undefined;
  };
  const versus = (a: string, b: string, target: number) => {
    const x = rps(a), y = rps(b);
    if (x === undefined || !y) return `${a} ÷ ${b}: not measured (target ≥ ${target})`;
    const ratio = x / y;
    return `${a} ÷ ${b} = **${ratio.toFixed(2)}** (target ≥ ${target}: ` +
      `${ratio >= target ? "met" : "missed"})`;
  };
  const errors = ran.reduce((sum, r) => sum + r.non2xx + r.sock_err, 0);
  const onePeak = ran.filter((r) => PG_ONE_PROCESS.includes(r.name));
  const peak = Math.max(0, ...onePeak.map((r) => r.peakRssMiB));
  const rss = onePeak.length
    ? `peak RSS of one service process on PostgreSQL with ${count(info.sessions)} sessions ` +
      `(+ as many with codes): **${peak.toFixed(0)} MiB** (target ≤ ${PG_TARGETS.peakRssMiB}: ` +
      `${peak <= PG_TARGETS.peakRssMiB ? "met" : "missed"})`
    : "peak RSS: no one-process case on PostgreSQL ran";
  const cores = ran.map((r) => {
    const service = r.cpuUsPerReq * r.rps / 1e6, database = (r.databaseUsPerReq ?? 0) * r.rps / 1e6;
    const wrk = r.wrkCores ?? 0;
    return `${r.name} ${service.toFixed(2)} service + ${database.toFixed(2)} PostgreSQL + ` +
      `${wrk.toFixed(2)} wrk = ${(service + database + wrk).toFixed(2)}`;
  });
  return [
    `PostgreSQL store (issue 25 §3) in this run: ` +
    `${versus("refresh-pg", "refresh", PG_TARGETS.refreshRatio)}; ` +
    `${versus("refresh-pg-2proc", "refresh-pg", PG_TARGETS.twoProcessRatio)}; ` +
    `errors (non-2xx and socket errors) in the PostgreSQL cases: **${count(errors)}**; ${rss}.`,
    "",
    `CPU cores used while measured (of ${cpuCountOf(info)}): ${cores.join("; ")}.`,
  ];
}

/** The CPU count at the start of the machine line ("2 × Intel…"). */
function cpuCountOf(info: RunInfo): string {
  return info.machine.match(/^(\d+) ×/)?.[1] ?? "?";
}

/**
 * Issue 35 §4's target: what 50 configured servers cost a call, against one, in this run. The
 * difference sought (5%) is below this machine's noise for one measurement, so a run may repeat
 * both cases (BENCH_CASES naming them in turns): the medians of their runs are compared.
 */
function serversLines(results: CaseResult[]): string[] {
  const cpuOf = (name: string) =>
    results.filter((r) => r.name === name && !r.skipped && r.cpuUsPerReq > 0)
      .map((r) => r.cpuUsPerReq);
  const one = cpuOf("gateway-1-server"), many = cpuOf("gateway-50-servers");
  if (!one.length || !many.length) return [];
  const ratio = median(many) / median(one);
  const runs = (values: number[]) => values.map((v) => v.toFixed(0)).join(", ");
  return [
    `Configured servers (issue 35 §4) in this run: server CPU per call with 50 servers ÷ with ` +
    `one = **${ratio.toFixed(2)}** (medians: ${median(many).toFixed(0)} µs [${runs(many)}] vs ` +
    `${median(one).toFixed(0)} µs [${runs(one)}]; target ≤ ${SERVERS_CPU_RATIO}: ` +
    `${ratio <= SERVERS_CPU_RATIO ? "met" : "missed"}).`,
  ];
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

function gatewayLines(results: CaseResult[]): string[] {
  const byName = resultsByName(results);
  const direct = byName.get("mcp-direct"), gateway = byName.get("gateway");
  if (!direct || !gateway || direct.skipped || gateway.skipped) return [];
  const added = (key: "p50_us" | "p99_us") => ms(gateway[key] - direct[key]);
  return [
    `Gateway's added latency over a direct call to the MCP server, one request at a time: ` +
    `**${added("p50_us")} ms** at p50, **${added("p99_us")} ms** at p99 ` +
    `(server CPU ${gateway.cpuUsPerReq.toFixed(0)} µs per proxied request).`,
  ];
}

function sizeLines(sizes: SizeResult[]): string[] {
  if (!sizes.length) return [];
  const lines = [
    "Refresh at several session counts (a KV with only that many sessions, seeded by " +
    "`bench/seed.ts`; chained refresh tokens so the load can outlast the seeded set):",
    "",
    "| sessions | seeding s | KV file MiB | KV bytes/session | idle RSS MiB | peak RSS MiB | " +
    "req/s | server CPU µs/req (KV thread) | p50 ms | p99 ms | responses | other load |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
  ];
  for (const s of sizes) {
    const r = s.result;
    lines.push(
      `| ${count(s.sessions)} | ${s.seedS.toFixed(0)} | ${(s.kvBytes / MiB).toFixed(0)} | ` +
        `${(s.kvBytes / s.sessions).toFixed(0)} | ${r.idleRssMiB.toFixed(0)} | ` +
        `${r.peakRssMiB.toFixed(0)} | ${count(Math.round(r.rps))} | ${cpuCell(r)} | ` +
        `${ms(r.p50_us)} | ${ms(r.p99_us)} | ${responsesCell(r)} | ${r.otherCores.toFixed(2)} |`,
    );
  }
  if (sizes.length > 1) {
    const first = sizes[0], last = sizes[sizes.length - 1];
    lines.push(
      "",
      `Refresh cost ${count(first.sessions)} → ${count(last.sessions)} sessions: req/s ×` +
        `${(last.result.rps / first.result.rps).toFixed(2)}, CPU µs/req ×` +
        `${(last.result.cpuUsPerReq / first.result.cpuUsPerReq).toFixed(2)}.`,
    );
  }
  return lines;
}

/** Server CPU per request, the KV thread's part in parentheses. */
function cpuCell(r: CaseResult): string {
  return `${r.cpuUsPerReq.toFixed(0)} (${r.kvThreadUsPerReq.toFixed(0)})`;
}

/** The response counts by status, "200:3000 400:12". */
function responsesCell(r: CaseResult): string {
  return r.statuses.replaceAll(",", " ");
}

/** The one file the report writers may change, relative to the project root. */
export const BENCH_README = "bench/README.md";

/**
 * Replaces what is between the `name` markers (`<!-- name:start -->`, `<!-- name:end -->`) of
 * bench/README.md with `table`, and formats the result as `deno fmt` would (with `root`'s
 * deno.json), so that `deno fmt --check` stays green. Nothing else is ever written: it throws,
 * leaving every file as it was, when `path` is not `root`'s bench/README.md (after symlinks),
 * when that file lacks exactly one start marker followed by one end marker of `name`, when
 * another marker lies between them or `table` holds one, and when formatting would change a
 * byte outside the markers (a file not formatted: run `deno fmt bench/README.md` first).
 */
export async function writeReadme(
  path: string,
  table: string,
  root: string,
  name = "results",
): Promise<void> {
  const target = await benchReadme(path, root);
  if (!/^[a-z0-9][a-z0-9_.-]*$/i.test(name)) {
    throw new Error(`bad marker name ${JSON.stringify(name)}`);
  }
  const start = `<!-- ${name}:start -->`, end = `<!-- ${name}:end -->`;
  if (MARKER.test(table)) throw new Error(`refusing to write ${target}: the table holds a marker`);
  const text = await Deno.readTextFile(target);
  const a = text.indexOf(start), b = text.indexOf(end);
  const starts = text.split(start).length - 1, ends = text.split(end).length - 1;
  if (starts !== 1 || ends !== 1 || b < a) {
    throw new Error(
      `refusing to write ${target}: it needs one ${start} followed by one ${end} ` +
        `(found ${starts} start and ${ends} end${
          starts === 1 && ends === 1 ? ", in the wrong order" : ""
        })`,
    );
  }
  const before = text.slice(0, a + start.length), after = text.slice(b);
  if (MARKER.test(text.slice(a + start.length, b))) {
    throw new Error(`refusing to write ${target}: another marker lies between ${start} and ${end}`);
  }
  const next = await formatMarkdown(`${before}\n\n${table.trim()}\n\n${after}`, root);
  if (!next.startsWith(before) || !next.endsWith(after)) {
    throw new Error(
      `refusing to write ${target}: formatting would change it outside the ${name} markers ` +
        `(run deno fmt ${BENCH_README} first)`,
    );
  }
  if (next === text) return say(`the ${name} in ${target} are unchanged`);
  await Deno.writeTextFile(target, next);
  say(`wrote the ${name} into ${target}`);
}

/** Any `<!-- x:start -->` or `<!-- x:end -->` marker. */
const MARKER = /<!--\s*[\w.-]+:(?:start|end)\s*-->/;

/** `path`, resolved, when it is `root`'s bench/README.md; throws for any other file. */
async function benchReadme(path: string, root: string): Promise<string> {
  const real = async (p: string) => {
    try {
      return await Deno.realPath(p);
    } catch (error) {
      throw new Error(`refusing to write ${path}: ${p} cannot be resolved (${error})`);
    }
  };
  const expected = `${(await real(root)).replace(/\/+$/, "")}/${BENCH_README}`;
  const actual = await real(path);
  if (actual !== expected) {
    throw new Error(`refusing to write ${path}: the bench writes only into ${expected}`);
  }
  return actual;
}

/** `text` formatted as `deno fmt` formats a markdown file, with `root`'s deno.json. */
async function formatMarkdown(text: string, root: string): Promise<string> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["fmt", `--config=${root}/deno.json`, "--ext=md", "-"],
    cwd: root,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const out = await child.output();
  if (!out.success) {
    throw new Error(`deno fmt failed: ${new TextDecoder().decode(out.stderr).trim()}`);
  }
  return new TextDecoder().decode(out.stdout);
}
