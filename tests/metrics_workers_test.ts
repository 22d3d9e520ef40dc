/**
 * Whole metrics under `deno serve --parallel` (issue 38 §4): a real `deno serve --parallel`
 * process with two workers, requests and scrapes each on a connection of its own (so the kernel
 * spreads them over the workers): every scrape counts every request answered before it
 * started, and no family's total goes down between scrapes. Then the workers' protocol in one
 * process: histograms and series only one worker has are added up, and a worker that stops
 * answering keeps the counts it last sent.
 */

import assert from "node:assert/strict";
import parsePrometheusText from "parse-prometheus-text-format";
import { Registry } from "../src/metrics_registry.ts";
import { shareCounts } from "../src/metrics/workers.ts";
import { denoServeArgs, spawnWithGitLab, waitFor } from "./_service.ts";

const METRICS_TOKEN = "metrics-token-that-is-at-least-32-bytes!";
const WORKERS = 2;
const ROUNDS = 6;
const REQUESTS_PER_ROUND = 10;

/** A family as parse-prometheus-text-format reads it. */
interface ParsedFamily {
  name: string;
  type: string;
  metrics: { value?: string; labels?: Record<string, string> }[];
}

const parseText = parsePrometheusText as (text: string) => ParsedFamily[];

/**
 * Each counter's samples added up, and each histogram's `_count`s (its series' observations),
 * by family; the whole text read by parse-prometheus-text-format first (it throws on a bad line).
 */
function familyTotals(text: string): Map<string, number> {
  const types = new Map(parseText(text).map((family) => [family.name, family.type.toLowerCase()]));
  const totals = new Map<string, number>();
  for (const [, name, value] of text.matchAll(/^([a-z_]+)(?:\{[^}]*\})? (\S+)$/gm)) {
    const histogram = name.match(/^(.*)_count$/)?.[1];
    const family = types.get(name) === "counter"
      ? name
      : histogram && types.get(histogram) === "histogram"
      ? histogram
      : undefined;
    if (family) totals.set(family, (totals.get(family) ?? 0) + Number(value));
  }
  return totals;
}

/** `http_requests_total` of `route`, every status added up. */
function requestsOf(text: string, route: string): number {
  const family = parseText(text).find((f) => f.name === "gitlab_mcp_auth_http_requests_total");
  return (family?.metrics ?? [])
    .filter((sample) => sample.labels?.route === route)
    .reduce((sum, sample) => sum + Number(sample.value), 0);
}

Deno.test("deno serve --parallel: every scrape counts every worker's requests, and no total goes down", async () => {
  const { service, close } = await spawnWithGitLab(
    "workers-app",
    { DENO_JOBS: String(WORKERS), METRICS_TOKEN },
    denoServeArgs(["--parallel"]),
  );
  // A connection per request (`fresh`): the kernel hands each to one worker or the other. A
  // kept-alive one (`pinned`, new each round) sends a whole round to one worker.
  const fresh = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  let pinned = Deno.createHttpClient({});
  const get = async (
    path: string,
    headers: Record<string, string> = {},
    client: Deno.HttpClient = fresh,
  ) => {
    const response = await fetch(`${service.url}${path}`, { client, headers });
    return { status: response.status, text: await response.text() };
  };
  const scrape = async () => {
    const answer = await get("/metrics", { authorization: `Bearer ${METRICS_TOKEN}` });
    assert.equal(answer.status, 200);
    return answer.text;
  };
  try {
    await waitFor(() =>
      service.logs.filter((line) => line.includes('"ready to serve"')).length === WORKERS
    );
    let previous = familyTotals(await scrape());
    const before = requestsOf(await scrape(), "/healthz");
    let answered = 0;
    for (let round = 0; round < ROUNDS; round++) {
      // Odd rounds spread their requests, even ones load one worker (so the workers differ).
      pinned.close();
      pinned = Deno.createHttpClient({});
      const client = round % 2 === 0 ? pinned : fresh;
      for (let i = 0; i < REQUESTS_PER_ROUND; i++) {
        assert.equal((await get("/healthz", {}, client)).status, 200);
        answered++;
      }
      // Two scrapes a round: consecutive ones reach different workers now and then.
      for (let i = 0; i < 2; i++) {
        const text = await scrape();
        assert.equal(requestsOf(text, "/healthz") - before, answered, `round ${round}`);
        const totals = familyTotals(text);
        for (const [name, total] of previous) {
          assert.ok(
            (totals.get(name) ?? 0) >= total,
            `${name} went down: ${total} → ${totals.get(name)}`,
          );
        }
        previous = totals;
      }
    }
  } finally {
    fresh.close();
    pinned.close();
    await close();
  }
});

Deno.test("workers' counts: histograms and series of one worker only are added up; a worker that stops answering keeps its last counts", async () => {
  const name = `metrics-test-${crypto.randomUUID()}`;
  const registries = [new Registry(), new Registry(), new Registry()];
  const channels = registries.map(() => new BroadcastChannel(name));
  const shared = registries.map((registry, i) =>
    shareCounts(channels[i], () => registry.snapshot(), 200)
  );
  const counters = registries.map((registry) =>
    registry.counter<{ route: string }>({
      name: "requests_total",
      help: "h",
      labelNames: ["route"],
    })
  );
  const histograms = registries.map((registry) =>
    registry.histogram<Record<never, string>>({
      name: "duration_seconds",
      help: "h",
      labelNames: [],
      buckets: [0.1, 1],
    })
  );
  try {
    // Each knows the other two once their hellos are through.
    for (const workers of shared) {
      await waitForAsync(async () => (await workers.collect()).length === 2);
    }
    counters[0].inc({ route: "/a" });
    counters[1].inc({ route: "/a" }, 2);
    counters[2].inc({ route: "/b" }, 5);
    histograms[0].observe({}, 0.05);
    histograms[1].observe({}, 0.5);
    histograms[2].observe({}, 3);
    const first = await registries[0].render(await shared[0].collect());
    assert.match(first, /^requests_total\{route="\/a"\} 3$/m);
    assert.match(first, /^requests_total\{route="\/b"\} 5$/m);
    assert.match(first, /^duration_seconds_bucket\{le="0.1"\} 1$/m);
    assert.match(first, /^duration_seconds_bucket\{le="1"\} 2$/m);
    assert.match(first, /^duration_seconds_bucket\{le="\+Inf"\} 3$/m);
    assert.match(first, /^duration_seconds_sum 3.55$/m);
    assert.match(first, /^duration_seconds_count 3$/m);

    // Worker 2 leaves after counting more: what it sent last stays in every scrape.
    counters[2].inc({ route: "/b" });
    channels[2].close();
    counters[1].inc({ route: "/a" });
    const second = await registries[0].render(await shared[0].collect());
    assert.match(second, /^requests_total\{route="\/a"\} 4$/m);
    assert.match(second, /^requests_total\{route="\/b"\} 5$/m);
    // Another worker's scrape sees the same.
    const third = await registries[1].render(await shared[1].collect());
    assert.match(third, /^requests_total\{route="\/a"\} 4$/m);
    assert.match(third, /^requests_total\{route="\/b"\} 5$/m);
  } finally {
    for (const channel of channels) channel.close();
  }
});

/** Resolves once `condition` answers true (asked every 10 ms); throws after 5 s. */
async function waitForAsync(condition: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

Deno.test("workers' counts: a worker started again in place of one that ended adds its counts to the last the ended one sent", async () => {
  const name = `metrics-test-${crypto.randomUUID()}`;
  const counter = (registry: Registry) =>
    registry.counter<{ route: string }>({
      name: "requests_total",
      help: "h",
      labelNames: ["route"],
    });
  const scraper = new Registry();
  const scraperChannel = new BroadcastChannel(name);
  const scraping = shareCounts(scraperChannel, () => scraper.snapshot(), 200);
  counter(scraper).inc({ route: "/a" });
  const channels: BroadcastChannel[] = [scraperChannel];
  /** A worker joining the channel, having counted `count` requests. */
  const startWorker = (count: number) => {
    const registry = new Registry();
    const channel = new BroadcastChannel(name);
    channels.push(channel);
    shareCounts(channel, () => registry.snapshot(), 200);
    counter(registry).inc({ route: "/a" }, count);
    return channel;
  };
  const totalOf = async () => {
    const text = await scraper.render(await scraping.collect());
    return Number(text.match(/^requests_total\{route="\/a"\} (\d+)$/m)?.[1]);
  };
  try {
    const first = startWorker(3);
    await waitForAsync(async () => await totalOf() === 4);
    // The worker ends (its process restarted it, or it crashed), and another takes its place.
    first.close();
    startWorker(2);
    await waitForAsync(async () => await totalOf() === 6);
    assert.equal(await totalOf(), 6, "the ended worker's 3, the new one's 2 and the scraper's 1");
  } finally {
    for (const channel of channels) channel.close();
  }
});
