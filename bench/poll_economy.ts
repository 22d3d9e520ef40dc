/**
 * `deno task bench-poll-economy`: how many GitLab calls the device-flow sign-in costs (issue 13
 * item 2). The service runs as `deno task start` does (pinned to CPU 0 when taskset is there); the
 * simulated GitLab (interval 5 s, as GitLab.com) and the browser pages run in this process, which
 * counts every GitLab request. Two parts, each a short fixed time on the wall clock:
 *
 * 1. Pending load: BENCH_ECONOMY_FLOWS (1,000) sign-ins nobody approves, each page polling as
 *    the spec's page does (5 s after each answer), then the same flows with pages polling every
 *    second (a client that polls faster, several tabs); reports GitLab calls/s beside what one
 *    call per page poll (the service before the poll economy) would have made, against the
 *    target of at most one call per flow per interval (1,000 / 5 s = 200/s).
 * 2. Completed sign-ins: BENCH_ECONOMY_SIGN_INS (50) sign-ins, each authorization URL opened
 *    twice (as MCP Inspector does) and both pages polling; GitLab approves each 2–12 s after
 *    the page loads. Reports GitLab calls per completed sign-in (device authorization, token
 *    polls, user lookup) and how long after the approval the page completed.
 *
 * Writes the figures into bench/README.md between the poll-economy markers (unless
 * BENCH_WRITE_README=0). Environment: BENCH_ECONOMY_FLOWS, BENCH_ECONOMY_SIGN_INS,
 * BENCH_ECONOMY_SECONDS (per pending measurement, default 20), BENCH_PORT (default 18090; GitLab
 * gets the next), BENCH_NO_PIN=1.
 */

import { type SimulatedGitLab, startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { BENCH_DIR, GITLAB_CLIENT_ID, ROOT } from "./config.ts";
import { count } from "./format.ts";
import { say } from "./log.ts";
import { canPin, cpuCount, cpuModel, pinner, serviceRevision } from "./machine.ts";
import { createProcessGroup } from "./processes.ts";
import { writeReadme } from "./report.ts";
import { createBenchServers } from "./servers.ts";
import { sleep } from "./timing.ts";

const INTERVAL_S = 5;
const SPEC_PAGE_MS = 5_000;
const FAST_PAGE_MS = 1_000;
/** Pages open over the first half of this, and nothing is counted before it has passed. */
const WARM_UP_MS = 2 * INTERVAL_S * 1000;
const CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

interface Settings {
  flows: number;
  signIns: number;
  seconds: number;
  port: number;
  pin: boolean;
  writeReadme: boolean;
}

function settings(): Settings {
  const int = (name: string, fallback: number) => {
    const value = Number(Deno.env.get(name) ?? fallback);
    if (!Number.isInteger(value) || value <= 0) {
      throw new Error(`${name} must be a positive integer`);
    }
    return value;
  };
  return {
    flows: int("BENCH_ECONOMY_FLOWS", 1000),
    signIns: int("BENCH_ECONOMY_SIGN_INS", 50),
    seconds: int("BENCH_ECONOMY_SECONDS", 20),
    port: int("BENCH_PORT", 18090),
    pin: Deno.env.get("BENCH_NO_PIN") !== "1",
    writeReadme: Deno.env.get("BENCH_WRITE_README") !== "0",
  };
}

/** One page: the flow it polls and the user code it shows. */
interface Page {
  flowState: string;
  userCode: string;
}

/** Loads the authorization page of sign-in `id` (state `id`). */
async function loadPage(base: string, id: string): Promise<Page> {
  const query = new URLSearchParams({
    response_type: "code",
    client_id: "bench-client",
    redirect_uri: "http://127.0.0.1:9/cb",
    code_challenge: CHALLENGE,
    code_challenge_method: "S256",
    state: id,
  });
  const response = await fetch(`${base}/authorize?${query}`);
  const html = await response.text();
  const flowState = html.match(/"flowState":"([^"]+)"/)?.[1];
  const userCode = html.match(/<p id="user-code"[^>]*>([^<]+)</)?.[1];
  if (response.status !== 200 || !flowState || !userCode) {
    throw new Error(`/authorize answered ${response.status} without a flow`);
  }
  return { flowState, userCode };
}

/** Runs `task` over `items`, `workers` at a time. */
async function inParallel<T, R>(items: T[], workers: number, task: (item: T) => Promise<R>) {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: workers }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await task(items[i]);
    }
  }));
  return results;
}

/** One page poll; the poll body's status ("error" when the request failed). */
async function pollOnce(base: string, flowState: string): Promise<string> {
  try {
    const response = await fetch(`${base}/oauth/poll?flow_state=${encodeURIComponent(flowState)}`);
    return String((await response.json()).status);
  } catch {
    return "error";
  }
}

/** A page's poll loop: `periodMs` after each answer (as templates/device.js), until `until`. */
async function runPage(
  base: string,
  page: Page,
  periodMs: number,
  firstDelayMs: number,
  until: () => boolean,
  onAnswer: (status: string) => void,
): Promise<void> {
  await sleep(firstDelayMs);
  while (!until()) {
    const status = await pollOnce(base, page.flowState);
    onAnswer(status);
    if (status !== "pending" && status !== "error") return;
    await sleep(periodMs);
  }
}

interface PendingFigures {
  pagePeriodMs: number;
  flows: number;
  seconds: number;
  pagePolls: number;
  gitlabCalls: number;
}

/**
 * `pages` poll every `periodMs`; after a warm-up of two intervals (when every flow has settled
 * into its rhythm), counts page polls and GitLab's device-token calls for `seconds`.
 */
async function pendingLoad(
  base: string,
  gitlab: SimulatedGitLab,
  pages: Page[],
  periodMs: number,
  seconds: number,
): Promise<PendingFigures> {
  say(`pending: ${pages.length} pages polling every ${periodMs} ms, ${seconds} s measured`);
  let pagePolls = 0;
  let stop = false;
  const running = Promise.all(
    pages.map((page) =>
      // Pages open at random moments over an interval, as people's do.
      runPage(base, page, periodMs, Math.random() * WARM_UP_MS / 2, () => stop, () => pagePolls++)
    ),
  );
  await sleep(WARM_UP_MS);
  const before = { pagePolls, gitlabCalls: gitlab.calls.deviceToken, at: performance.now() };
  await sleep(seconds * 1000);
  const after = { pagePolls, gitlabCalls: gitlab.calls.deviceToken, at: performance.now() };
  stop = true;
  await running;
  return {
    pagePeriodMs: periodMs,
    flows: pages.length,
    seconds: (after.at - before.at) / 1000,
    pagePolls: after.pagePolls - before.pagePolls,
    gitlabCalls: after.gitlabCalls - before.gitlabCalls,
  };
}

interface SignInFigures {
  signIns: number;
  completed: number;
  authorizeDevice: number;
  deviceToken: number;
  user: number;
  /** Seconds from GitLab's approval to the first page seeing `complete`. */
  approvalToComplete: number[];
}

/** Sign-ins opened twice each, approved 2–12 s after loading, until complete (60 s at most). */
async function completedSignIns(
  base: string,
  gitlab: SimulatedGitLab,
  signIns: number,
): Promise<SignInFigures> {
  say(`sign-ins: ${signIns}, each authorization URL opened twice, approved after 2–12 s`);
  const before = { ...gitlab.calls };
  const deadline = performance.now() + 60_000;
  const latencies: number[] = [];
  let completed = 0;
  await Promise.all(Array.from({ length: signIns }, async (_, i) => {
    const id = `sign-in-${i}-${crypto.randomUUID()}`;
    const pages = await Promise.all([loadPage(base, id), loadPage(base, id)]);
    let approvedAt = 0;
    let finished = false;
    const approval = sleep(2_000 + Math.random() * 10_000).then(() => {
      gitlab.approve(pages[0].userCode);
      approvedAt = performance.now();
    });
    const page = (p: Page) =>
      runPage(
        base,
        p,
        SPEC_PAGE_MS,
        SPEC_PAGE_MS,
        () => finished || performance.now() > deadline,
        (status) => {
          if (status !== "complete" || finished) return;
          finished = true;
          completed++;
          latencies.push((performance.now() - approvedAt) / 1000);
        },
      );
    await Promise.all([approval, ...pages.map(page)]);
  }));
  return {
    signIns,
    completed,
    authorizeDevice: gitlab.calls.authorizeDevice - before.authorizeDevice,
    deviceToken: gitlab.calls.deviceToken - before.deviceToken,
    user: gitlab.calls.user - before.user,
    approvalToComplete: latencies.sort((a, b) => a - b),
  };
}

function report(
  when: Date,
  revision: string,
  pinned: boolean,
  pending: PendingFigures[],
  signIns: SignInFigures,
): string {
  const rate = (n: number, s: number) => (n / s).toFixed(1);
  const lines = [
    `Measured ${
      when.toISOString().slice(0, 16).replace("T", " ")
    } UTC by \`deno task bench-poll-economy\` ` +
    `(service at ${revision}) on ${cpuCount()} × ${cpuModel()}, deno ${Deno.version.deno}; ` +
    `service ${
      pinned ? "pinned to CPU 0" : "not pinned"
    }, GitLab (simulated, interval ${INTERVAL_S} s) ` +
    `and the pages in the bench process. The counts of GitLab calls, not the timings, are the ` +
    `result: the timings move with whatever else the machine runs.`,
    "",
    "| pending sign-ins | page polls every | measured s | page polls/s | GitLab calls/s | one call per page poll would be | target (≤ flows / interval) | met? |",
    "| ---------------: | ---------------: | ---------: | -----------: | -------------: | ------------------------------: | --------------------------: | ---- |",
    ...pending.map((p) => {
      const target = p.flows / INTERVAL_S;
      const calls = p.gitlabCalls / p.seconds;
      return `| ${count(p.flows)} | ${p.pagePeriodMs / 1000} s | ${p.seconds.toFixed(1)} | ` +
        `${rate(p.pagePolls, p.seconds)} | **${calls.toFixed(1)}** | ${
          rate(p.pagePolls, p.seconds)
        } | ` +
        `${target.toFixed(0)} | ${calls <= target ? "yes" : "no"} |`;
    }),
    "",
  ];
  const s = signIns;
  const per = (n: number) => s.completed ? (n / s.completed).toFixed(2) : "–";
  const latency = s.approvalToComplete;
  const pct = (q: number) =>
    latency.length
      ? latency[Math.min(latency.length - 1, Math.floor(q * latency.length))].toFixed(1)
      : "–";
  lines.push(
    `Completed sign-ins: ${s.completed} of ${s.signIns}, each authorization URL opened twice (as ` +
      `MCP Inspector does) with both pages polling every 5 s; GitLab calls per completed sign-in: ` +
      `**${per(s.authorizeDevice + s.deviceToken + s.user)}** (device authorization ${
        per(s.authorizeDevice)
      }, ` +
      `token polls ${per(s.deviceToken)}, user lookup ${
        per(s.user)
      }). From GitLab's approval to the ` +
      `page's \`complete\`: median ${pct(0.5)} s, max ${
        latency.length ? latency.at(-1)!.toFixed(1) : "–"
      } s ` +
      `(target: within interval + 1 s of the page's next poll, i.e. ≤ 5 s page period + 5 s + 1 s).`,
  );
  return lines.join("\n");
}

async function main(): Promise<void> {
  const config = settings();
  const pinned = await canPin(!config.pin);
  const processes = createProcessGroup({ root: ROOT, pin: pinner(pinned) });
  const dir = await Deno.makeTempDir({ prefix: "poll-economy-" });
  const gitlab = startSimulatedGitLab({
    port: config.port + 1,
    interval: INTERVAL_S,
    deviceExpiresInSeconds: 3600,
    clientId: GITLAB_CLIENT_ID,
  });
  try {
    const servers = createBenchServers(processes, dir, config.port, {});
    await servers.service("poll-economy", { kvPath: `${dir}/kv.sqlite` }, gitlab.url.href);
    const base = `http://127.0.0.1:${config.port}`;
    const started = new Date();

    say(`creating ${config.flows} pending sign-ins`);
    const ids = Array.from({ length: config.flows }, (_, i) => `pending-${i}`);
    const pages = await inParallel(ids, 16, (id) => loadPage(base, id));
    const pending = [
      await pendingLoad(base, gitlab, pages, SPEC_PAGE_MS, config.seconds),
      await pendingLoad(base, gitlab, pages, FAST_PAGE_MS, config.seconds),
    ];
    const signIns = await completedSignIns(base, gitlab, config.signIns);
    const text = report(started, await serviceRevision(ROOT), pinned, pending, signIns);
    // deno-lint-ignore no-console -- the report is this tool's output
    console.log(text);
    if (config.writeReadme) await writeReadme(`${BENCH_DIR}README.md`, text, ROOT, "poll-economy");
  } finally {
    await processes.stopAll();
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) await main();
