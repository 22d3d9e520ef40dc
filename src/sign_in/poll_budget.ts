/**
 * The service-wide budget of GitLab device-token polls (GITLAB_POLL_BUDGET a second, every
 * instance together), spent fairly: each one-second window holds the budget's polls, and a
 * client prefix (IPv4 /24, IPv6 /56) that started the flow takes at most its share of them, the
 * window's polls divided by the prefixes that asked lately. A flow of a RATE_LIMIT_EXEMPT client
 * has no share to keep to, only the window's polls; a loopback one (RATE_LIMIT_LOOPBACK=exempt)
 * is not counted. A fifth of each window (one poll, from two a window) is kept for flows near
 * their expiry that missed a poll. A poll the budget refuses answers `pending`, as any poll
 * between GitLab's intervals does.
 *
 * A 429 from GitLab on a device-token poll (the traffic this budget governs) halves the budget
 * from the end of the pause it imposes; it then grows back linearly to GITLAB_POLL_BUDGET.
 *
 * @see docs/spec-choices.md "Poll economy (device mode)",
 *   docs/security.md "Abuse limits"
 */

import type { SignInContext } from "./deps.ts";
import type { BudgetCut, PollBudgetState, PollDecision } from "../store/mod.ts";
import type { ActivePrefixes } from "../store/poll_budget.ts";
import type { FlowRecord } from "../store/records.ts";

/** A prefix counts among those sharing the budget this long after it last asked (3 page polls). */
const ACTIVE_FOR_MS = 15_000;
/** How stale a prefix's last asking may be before a poll writes it again (bounds the writes). */
const ACTIVE_REFRESH_MS = 5_000;
/** At most this many prefixes are remembered; the longest silent are forgotten first. */
const MAX_ACTIVE_PREFIXES = 256;
/** A flow this close to its expiry that missed a poll may use the reserved part of a window. */
const NEAR_EXPIRY_MS = 60_000;
/** After a cut the budget regains the configured rate over this long. */
const RECOVERY_MS = 10 * 60_000;
/** The lowest a cut takes the budget: one poll in five seconds. */
const MIN_BUDGET = 0.2;
/** Lost races a poll decides again after (each one is another poll's decision). */
const EXTRA_DECIDE_ATTEMPTS = 10;

/**
 * Takes one GitLab poll from the current window for `flow`, or answers false when its prefix has
 * spent its share (or the window is spent). Flows of loopback clients (neither a prefix nor
 * `exemptFromShare`) are not counted.
 */
export async function takePollSlot(ctx: SignInContext, flow: FlowRecord): Promise<boolean> {
  const prefix = flow.clientPrefix;
  if (prefix === undefined && !flow.exemptFromShare) return true;
  const { store, clock, config } = ctx.deps;
  const now = clock.now();
  const second = Math.floor(now / 1000);
  const urgent = isNearExpiry(flow, now);
  return await store.decidePoll(
    second,
    (state) => {
      const perSecond = effectiveBudget(config.gitlabPollBudget, state.cut, now);
      return decidePoll(state, { prefix, urgent, slots: slotsOf(perSecond, second), now });
    },
    Math.ceil(config.gitlabPollBudget) + EXTRA_DECIDE_ATTEMPTS,
  );
}

/**
 * Halves the budget after GitLab's 429 on a device-token poll, from `pausedUntil` (the end of
 * the pause the 429 imposed). Several polls answered 429 before the pause was seen cut it once.
 */
export async function cutPollBudget(ctx: SignInContext, pausedUntil: number): Promise<void> {
  const { store, clock, config, logger } = ctx.deps;
  const now = clock.now();
  let cutTo: number | undefined;
  await store.cutPollBudget((current) => {
    if (current && current.since > now) return null;
    const to = Math.max(
      Math.min(config.gitlabPollBudget, MIN_BUDGET),
      effectiveBudget(config.gitlabPollBudget, current, now) / 2,
    );
    const since = Math.max(pausedUntil, now);
    cutTo = to;
    return { to, since, expiresAt: since + RECOVERY_MS };
  });
  if (cutTo !== undefined) {
    logger.warn("upstream rate limit: poll budget cut", {
      requestId: ctx.requestId,
      pollsPerSecond: Math.round(cutTo * 100) / 100,
    });
  }
}

/** Polls a second the budget allows at `now`: the configured rate, or what a cut left of it. */
export function effectiveBudget(configured: number, cut: BudgetCut | null, now: number): number {
  if (!cut) return configured;
  if (now < cut.since) return cut.to;
  return Math.min(configured, cut.to + configured * (now - cut.since) / RECOVERY_MS);
}

/** The polls of the window `second` at `perSecond`: a fractional rate spread over windows. */
export function slotsOf(perSecond: number, second: number): number {
  return Math.floor((second + 1) * perSecond) - Math.floor(second * perSecond);
}

/** The polls of a window kept for flows near their expiry. */
function reserveOf(slots: number): number {
  return slots < 2 ? 0 : Math.max(1, Math.floor(slots / 5));
}

/** Near its expiry and a whole interval past its due poll (or never polled). */
function isNearExpiry(flow: FlowRecord, now: number): boolean {
  return flow.expiresAt - now <= NEAR_EXPIRY_MS &&
    now >= (flow.nextPollAt ?? 0) + flow.intervalSeconds * 1000;
}

interface Asking {
  /** Undefined: a RATE_LIMIT_EXEMPT client's flow, held to the window's polls only. */
  prefix: string | undefined;
  urgent: boolean;
  slots: number;
  now: number;
}

/**
 * Whether a poll of `prefix` may go in this window: within the window's polls (all of them
 * when urgent, else all but the reserve) and within the prefix's share of them, the polls
 * divided by the prefixes that asked lately (this one included).
 */
export function decidePoll(state: PollBudgetState, asking: Asking): PollDecision {
  const { prefix, urgent, slots } = asking;
  const open = urgent ? slots : slots - reserveOf(slots);
  if (prefix !== undefined) return decideSharedPoll(state, { ...asking, prefix }, open);
  if (state.window.spent >= open) return { allowed: false };
  return { allowed: true, window: { ...state.window, spent: state.window.spent + 1 } };
}

/** decidePoll for a flow counted under `prefix`, given the window's `open` polls. */
function decideSharedPoll(
  state: PollBudgetState,
  { prefix, now }: Asking & { prefix: string },
  open: number,
): PollDecision {
  const recent = recentlyAsked(state.active, now);
  const competitors = Object.keys(recent).length + (Object.hasOwn(recent, prefix) ? 0 : 1);
  const mine = state.window.byPrefix[prefix] ?? 0;
  const allowed = state.window.spent < open && mine < Math.ceil(open / competitors);
  const decision: PollDecision = { allowed };
  if (allowed) {
    decision.window = {
      spent: state.window.spent + 1,
      byPrefix: { ...state.window.byPrefix, [prefix]: mine + 1 },
    };
  }
  if (!Object.hasOwn(recent, prefix) || now - recent[prefix] >= ACTIVE_REFRESH_MS) {
    decision.active = { lastAskedAt: newestFirst({ ...recent, [prefix]: now }) };
  }
  return decision;
}

/** The prefixes that asked within ACTIVE_FOR_MS. */
function recentlyAsked(active: ActivePrefixes, now: number): Record<string, number> {
  return Object.fromEntries(
    Object.entries(active.lastAskedAt).filter(([, at]) => now - at < ACTIVE_FOR_MS),
  );
}

/** At most MAX_ACTIVE_PREFIXES of them, the latest askers kept. */
function newestFirst(lastAskedAt: Record<string, number>): Record<string, number> {
  const entries = Object.entries(lastAskedAt);
  if (entries.length <= MAX_ACTIVE_PREFIXES) return lastAskedAt;
  return Object.fromEntries(
    entries.sort(([, a], [, b]) => b - a).slice(0, MAX_ACTIVE_PREFIXES),
  );
}
