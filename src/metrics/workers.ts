/**
 * Whole metrics under `deno serve --parallel`: every worker of the process counts its own
 * requests, and a scrape (which the kernel hands to one worker) asks the others for their counts
 * over a BroadcastChannel they share, then adds them to its own.
 *
 * The protocol: a worker says `hello` when it starts and every worker that hears it answers
 * `here`, so each knows the others whatever order they start in. A scrape sends `ask`; every
 * worker answers with its `counts` (cumulative, so a later answer is never smaller); the scrape
 * waits for every worker it knows, at most ANSWER_WAIT_MS. Answers go to every worker, and each
 * keeps the last counts of every other. A worker that does not answer in time is shown with the
 * last counts it sent (its requests still count, only not the newest), and is not waited for
 * again until it speaks. Nothing is ever dropped: a worker that exits keeps its last counts in
 * every later scrape.
 *
 * Because each answer is made after the scrape's `ask` was sent, a scrape counts every request
 * answered before it started, in any worker that answers.
 */

import type { HistogramCounts, SeriesCounts, Snapshot } from "../metrics_registry.ts";

/** How long a scrape waits for the other workers' counts (well under a scrape timeout). */
export const ANSWER_WAIT_MS = 2_000;

/** The BroadcastChannel name the workers of one `deno serve` process share. */
export const METRICS_CHANNEL = "gitlab-mcp-auth-metrics";

type Message =
  | { kind: "hello" | "here"; from: string }
  | { kind: "ask"; from: string; ask: string }
  | { kind: "counts"; from: string; to: string; ask: string; counts: Snapshot };

/** The other workers' counts, for this worker's scrapes. */
export interface WorkerCounts {
  /** Every other worker's counts: fresh from each that answers in time, else its last. */
  collect(): Promise<Snapshot[]>;
}

/** A scrape's wait: the workers that have not answered yet, and its end. */
interface Ask {
  waiting: Set<string>;
  done(): void;
}

/**
 * Joins the workers on `channel` (one BroadcastChannel per worker, of one name), answering
 * their scrapes with `ownCounts()`. Closing the channel leaves (and lets the worker exit: an
 * open channel keeps its event loop alive).
 */
export function shareCounts(
  channel: BroadcastChannel,
  ownCounts: () => Snapshot,
  answerWaitMs: number = ANSWER_WAIT_MS,
): WorkerCounts {
  const me = crypto.randomUUID();
  /** Every worker heard of, with the last counts it sent (none yet: `{}`). */
  const last = new Map<string, Snapshot>();
  /** Workers that missed a scrape's wait; not waited for until they speak again. */
  const silent = new Set<string>();
  const asks = new Map<string, Ask>();
  /** False once the channel is closed (the worker is stopping): its scrapes ask no one. */
  const post = (message: Message): boolean => {
    try {
      channel.postMessage(message);
      return true;
    } catch {
      return false;
    }
  };

  channel.onmessage = (event: MessageEvent) => {
    const message = messageOf(event.data);
    if (!message || message.from === me) return;
    if (!last.has(message.from)) last.set(message.from, {});
    silent.delete(message.from);
    if (message.kind === "hello") post({ kind: "here", from: me });
    else if (message.kind === "ask") {
      post({ kind: "counts", from: me, to: message.from, ask: message.ask, counts: ownCounts() });
    } else if (message.kind === "counts") {
      // Every worker keeps every answer, so all show the same last counts of one that stops.
      last.set(message.from, message.counts);
      if (message.to === me) answered(asks.get(message.ask), message.from);
    }
  };
  post({ kind: "hello", from: me });

  return {
    async collect() {
      const ask = crypto.randomUUID();
      const waiting = new Set([...last.keys()].filter((worker) => !silent.has(worker)));
      const { promise, resolve } = Promise.withResolvers<void>();
      asks.set(ask, { waiting, done: resolve });
      if (!post({ kind: "ask", from: me, ask }) || waiting.size === 0) resolve();
      const timer = setTimeout(resolve, answerWaitMs);
      await promise;
      clearTimeout(timer);
      asks.delete(ask);
      for (const worker of waiting) silent.add(worker);
      return [...last.values()];
    },
  };
}

function answered(ask: Ask | undefined, worker: string): void {
  if (!ask) return;
  ask.waiting.delete(worker);
  if (ask.waiting.size === 0) ask.done();
}

/** A message of this protocol, or undefined (the channel is the process's own, yet checked). */
function messageOf(data: unknown): Message | undefined {
  if (!isRecord(data) || typeof data.from !== "string") return undefined;
  switch (data.kind) {
    case "hello":
    case "here":
      return { kind: data.kind, from: data.from };
    case "ask":
      return typeof data.ask === "string"
        ? { kind: "ask", from: data.from, ask: data.ask }
        : undefined;
    case "counts":
      return typeof data.to === "string" && typeof data.ask === "string" && isSnapshot(data.counts)
        ? { kind: "counts", from: data.from, to: data.to, ask: data.ask, counts: data.counts }
        : undefined;
  }
  return undefined;
}

function isSnapshot(value: unknown): value is Snapshot {
  return isRecord(value) &&
    Object.values(value).every((family) =>
      isRecord(family) && Object.values(family).every(isSeriesCounts)
    );
}

function isSeriesCounts(value: unknown): value is SeriesCounts {
  return isCount(value) || isHistogramCounts(value);
}

function isHistogramCounts(value: unknown): value is HistogramCounts {
  return isRecord(value) && Array.isArray(value.counts) && value.counts.every(isCount) &&
    typeof value.sum === "number" && isCount(value.count);
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value) && value >= 0;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
