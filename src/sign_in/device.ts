/**
 * The device flow (RFC 8628) from our side. Starting: the flow an `/authorize` page shows, a new
 * one started at the upstream, or, when the identical request (every parameter, on the same base
 * URL, from the same client address) arrived within the last 60 seconds and its flow is still
 * live, that same flow. A double redirect, a prefetch or a reload then costs the upstream nothing
 * and leaves no abandoned device flow behind. Once the first flow is complete, failed or expired,
 * the same request starts a fresh flow (and the next 60 seconds share that one).
 *
 * Polling: what `GET /oauth/poll` answers. The upstream is asked at most once per interval per
 * flow (RFC 8628 §3.5, `slow_down` growing it), never while it asked the whole service to pause,
 * and by one instance at a time; on approval the session and the code are stored in one commit.
 *
 * @see spec §3.1, §4.1, §4.2, RFC 8628 §3.1–3.5, docs/spec-choices.md "Where the spec is
 *   silent"
 */

import type { SignInContext } from "./deps.ts";
import { randomToken, sha256Base64Url } from "../crypto.ts";
import type { RepeatRecord, Versioned } from "../store/mod.ts";
import {
  type FlowRecord,
  type SessionAccess,
  type UpstreamTokenSet,
  upstreamTokenSet,
} from "../store/records.ts";
import {
  type DeviceAuthorization,
  type DevicePollResult,
  type UpstreamBackoff,
  UpstreamError,
  type UpstreamUser,
} from "../upstream/types.ts";
import { admitSignIn, type SignInAdmission } from "./admission.ts";
import { orRevoke, revokeAbandonedUpstreamTokens, storeSignIn } from "./completion.ts";
import { admitNewFlow } from "./pending_caps.ts";
import { cutPollBudget, takePollSlot } from "./poll_budget.ts";
import { signInFailure } from "./upstream_failure.ts";
import { denyDeviceOfFlow, storeDeviceFlowSignIn } from "./device_authorization/flow_sign_in.ts";
import { PATHS } from "../http/paths.ts";

/** Flow state size parameter (spec §8): 32 random bytes. */
const FLOW_STATE_BYTES = 32;
/** How long identical `/authorize` requests share one flow. */
export const REPEAT_WINDOW_MS = 60_000;
/** How often a repeated request looks whether the first one has started the flow yet. */
const REPEAT_WAIT_STEP_MS = 25;

/** A flow the page can show. */
export interface ShownFlow {
  flowState: string;
  flow: FlowRecord;
}

/** Builds the flow record from the upstream's device authorization, at `nowMs`. */
export type FlowRecordOf = (device: DeviceAuthorization, nowMs: number) => FlowRecord;

/**
 * The flow for this request: the one an identical request within REPEAT_WINDOW_MS started, or a
 * new one. Throws what the upstream or the store throws when a new flow cannot be started.
 */
export async function deviceFlowFor(
  ctx: SignInContext,
  scopes: string,
  recordOf: FlowRecordOf,
): Promise<ShownFlow> {
  const { store, clock, config } = ctx.deps;
  const requestHash = requestHashOf(ctx);
  // A concurrent identical request may be talking to the upstream right now: wait for it as
  // long as that can take, then start a flow of our own rather than fail.
  const waitSteps = Math.ceil(config.upstreamTimeoutMs / REPEAT_WAIT_STEP_MS) + 1;
  for (let step = 0; step < waitSteps; step++) {
    const { live, versionstamp } = await store.getRepeat(requestHash);
    if (live) {
      const shown = await liveFlowOf(ctx, live.value);
      if (shown) return shown;
      if (isStarting(ctx, live.value)) {
        await new Promise((resolve) => setTimeout(resolve, REPEAT_WAIT_STEP_MS));
        continue;
      }
    }
    const now = clock.now();
    const claim = await store.claimRepeat(requestHash, versionstamp, {
      flowState: randomToken(FLOW_STATE_BYTES),
      started: false,
      claimedAt: now,
      expiresAt: now + REPEAT_WINDOW_MS,
    });
    // Another identical request claimed it between our read and write: show theirs.
    if (!claim) continue;
    return await startClaimed(ctx, claim, requestHash, scopes, recordOf);
  }
  return await startFlow(ctx, scopes, recordOf);
}

/** Starts the flow a claim names and tells identical requests it is there. */
async function startClaimed(
  ctx: SignInContext,
  claim: Versioned<RepeatRecord>,
  requestHash: string,
  scopes: string,
  recordOf: FlowRecordOf,
): Promise<ShownFlow> {
  const hashed: FlowRecordOf = (device, nowMs) => ({ ...recordOf(device, nowMs), requestHash });
  let shown: ShownFlow;
  try {
    shown = await startFlow(ctx, scopes, hashed, claim.value.flowState);
  } catch (error) {
    await ctx.deps.store.dropRepeat(claim);
    throw error;
  }
  await ctx.deps.store.markRepeatStarted(claim);
  return shown;
}

/**
 * A new flow asking GitLab for `scopes`: under a claim's `flowState`, or never shared with
 * another request (a `/device` sign-in's).
 */
export async function startFlow(
  ctx: SignInContext,
  scopes: string,
  recordOf: FlowRecordOf,
  flowState = randomToken(FLOW_STATE_BYTES),
): Promise<ShownFlow> {
  const counting = await admitNewFlow(ctx);
  const device = await ctx.oauth.upstream.startDeviceAuthorization(scopes);
  const flow = { ...recordOf(device, ctx.deps.clock.now()), ...counting };
  await ctx.deps.store.createFlow(flowState, flow);
  ctx.deps.metrics.signInsStarted.inc({ mode: "device" });
  return { flowState, flow };
}

/** The repeated request's flow, while it lives and is not yet done. */
async function liveFlowOf(
  ctx: SignInContext,
  repeat: RepeatRecord,
): Promise<ShownFlow | null> {
  if (!repeat.started) return null;
  const flow = await ctx.deps.store.getFlow(repeat.flowState);
  if (!flow || ctx.deps.clock.now() > flow.value.expiresAt) return null;
  return { flowState: repeat.flowState, flow: flow.value };
}

/** Whether the first request is still starting its flow (and has not died doing so). */
function isStarting(ctx: SignInContext, repeat: RepeatRecord): boolean {
  const { clock, config } = ctx.deps;
  return !repeat.started && clock.now() - repeat.claimedAt <= config.upstreamTimeoutMs;
}

/**
 * The hash of the whole authorization request: every parameter (order aside) and the base URL,
 * so a different `state` or `code_challenge` is a different request.
 */
function requestHashOf(ctx: SignInContext): string {
  const params = [...ctx.url.searchParams].sort(([a, x], [b, y]) =>
    a === b ? (x < y ? -1 : x > y ? 1 : 0) : (a < b ? -1 : 1)
  );
  // The client's address too: whoever else holds the URL (a proxy log, a synced history) must
  // not be shown the same user code, which they could approve with their own GitLab account.
  return sha256Base64Url(JSON.stringify([ctx.baseUrl, ctx.clientAddress(), params]));
}

/** The poll body of spec §2.4. */
export type PollBody =
  | { status: "pending" }
  | { status: "complete"; redirect_uri?: string; code: string; state?: string }
  | { status: "failed" | "expired"; error: string };

/** What a poll answers: the HTTP status and body of spec §4.2. */
export interface PollOutcome {
  httpStatus: 200 | 400;
  body: PollBody;
}

/** How much the upstream's `slow_down` adds to the polling interval (RFC 8628 §3.5). */
const SLOW_DOWN_STEP_SECONDS = 5;
/** The longest pause an upstream's rate-limit headers can impose on all polling. */
const MAX_PAUSE_MS = 15 * 60_000;

const PENDING: PollOutcome = { httpStatus: 200, body: { status: "pending" } };

function outcome(httpStatus: 200 | 400, body: PollBody): PollOutcome {
  return { httpStatus, body };
}

/**
 * One poll of the flow `flowState` names (spec §3.1, §4.2): expired or unknown flows answer so;
 * between upstream polls (and while the upstream is paused) it is "pending" from KV; otherwise,
 * holding the flow's lease, the upstream is asked once and the flow advanced.
 */
export async function pollFlow(ctx: SignInContext, flowState: string): Promise<PollOutcome> {
  const { store, clock, config } = ctx.deps;
  const flow = await store.getFlow(flowState);
  if (!flow) return outcome(400, { status: "expired", error: "Flow not found" });
  if (clock.now() > flow.value.expiresAt) {
    // Deleting it drops the copy of a token it held, which the sweep would have revoked.
    const held = await store.deleteFlow(flow) ? flow.value.upstreamTokens : undefined;
    if (held) await revokeAbandonedUpstreamTokens(ctx, held, "flow expired holding a token");
    ctx.deps.metrics.signInsFinished.inc({ mode: "device", outcome: "expired" });
    return outcome(400, { status: "expired", error: "Device code expired" });
  }

  // Between upstream polls (and while the upstream is paused) the page hears "pending" from KV.
  if (!flow.value.upstreamTokens && await upstreamPollWaits(ctx, flow.value)) return PENDING;

  // One upstream call per flow at a time, across instances: the others just see "pending".
  const lease = await store.tryLeaseFlow(flow, 2 * config.upstreamTimeoutMs + 5_000);
  if (!lease) return PENDING;
  try {
    // What we read may predate a poll that held the lease and finished since: the device code
    // may be spent (the upstream would answer invalid_grant) and the flow completed. Work on the
    // version current under the lease.
    const current = await store.getFlow(flowState);
    if (!current) return outcome(400, { status: "expired", error: "Flow not found" });
    try {
      return await advanceFlow(ctx, current);
    } catch (error) {
      if (!(error instanceof UpstreamError)) throw error;
      return await upstreamFailed(ctx, current, error);
    }
  } finally {
    await lease.release();
  }
}

/** Polls the upstream (unless it already gave us a token), looks up the user and completes. */
async function advanceFlow(
  ctx: SignInContext,
  flow: Versioned<FlowRecord>,
): Promise<PollOutcome> {
  const { store, clock } = ctx.deps;
  const { upstream } = ctx.oauth;
  let tokens = flow.value.upstreamTokens;
  if (!tokens) {
    if (await upstreamPollWaits(ctx, flow.value)) return PENDING;
    // Over the service's GitLab budget (or this client prefix's share of it): pending.
    if (!await takePollSlot(ctx, flow.value)) return PENDING;
    let result: DevicePollResult;
    try {
      result = await upstream.pollDeviceToken(flow.value.deviceCode);
    } catch (error) {
      if (error instanceof UpstreamError && error.failure === "transient") {
        await deferNextPoll(ctx, flow, flow.value.intervalSeconds);
      }
      throw error;
    }
    if (result.kind !== "token") {
      if (result.backoff) {
        const pausedUntil = await pauseUpstream(ctx, result.backoff, flow.value.intervalSeconds);
        // A 429 on a poll means our polls went over GitLab's limit: the budget was too large.
        if (result.kind === "rate_limited") await cutPollBudget(ctx, pausedUntil);
      }
      // RFC 8628 §3.5: after slow_down the interval grows by 5 s for this and every later poll.
      const grow = result.kind === "slow_down" ? SLOW_DOWN_STEP_SECONDS : 0;
      await deferNextPoll(ctx, flow, flow.value.intervalSeconds + grow);
      return PENDING;
    }
    tokens = upstreamTokenSet(result.tokens, clock.now());
    // The device code is spent now; keep the token before anything else can fail.
    const keep = (held: UpstreamTokenSet) => store.saveFlowUpstreamTokens(flow, held);
    const saved = await orRevoke(ctx, tokens, "flow not saved", keep);
    if (result.backoff) await pauseUpstream(ctx, result.backoff, flow.value.intervalSeconds);
    if (!saved) {
      // The flow went (expired under this poll): nothing else will ever know of this token.
      await revokeAbandonedUpstreamTokens(ctx, tokens, "flow changed while GitLab answered");
      return PENDING;
    }
    flow = saved;
  }
  let user: UpstreamUser;
  let admission: SignInAdmission;
  try {
    user = await upstream.fetchUser(tokens.accessToken);
    admission = await admitSignIn(ctx, tokens, user, flow.value.resource);
  } catch (error) {
    // Fail the flow as saved with the tokens, not the version the caller read.
    if (!(error instanceof UpstreamError)) throw error;
    // A terminal failure ends the flow that holds the tokens: revoke them (a transient one keeps
    // them in the flow for the next poll).
    if (error.failure !== "transient") {
      await revokeAbandonedUpstreamTokens(ctx, tokens, "user lookup failed");
    }
    return await upstreamFailed(ctx, flow, error);
  }
  if (admission.kind === "refused") {
    await ctx.deps.store.deleteFlow(flow);
    await denyDeviceOfFlow(ctx, flow.value, "refused by the allow-lists");
    return outcome(200, { status: "failed", error: admission.message });
  }
  return await complete(ctx, flow, tokens, user, admission.access);
}

/**
 * Whether the upstream must not be polled for this flow yet: its interval since the last
 * answer has not passed, or the upstream asked the whole service to pause.
 */
async function upstreamPollWaits(ctx: SignInContext, flow: FlowRecord): Promise<boolean> {
  const now = ctx.deps.clock.now();
  if (now < (flow.nextPollAt ?? 0)) return true;
  return now < await ctx.deps.store.upstreamPausedUntil();
}

/**
 * Records that the upstream may be polled for this flow again `intervalSeconds` after its
 * answer (not after our request: with the network's jitter that could reach the upstream a
 * little early, which GitLab answers with `slow_down`).
 */
async function deferNextPoll(
  ctx: SignInContext,
  flow: Versioned<FlowRecord>,
  intervalSeconds: number,
): Promise<void> {
  const { store, clock } = ctx.deps;
  await store.deferFlowPolling(flow, intervalSeconds, clock.now() + intervalSeconds * 1000);
}

/**
 * Pauses all upstream polling, service-wide, until the upstream's `Retry-After` or
 * `RateLimit-Reset` (one interval when it named neither; never longer than MAX_PAUSE_MS).
 * Returns when the pause it asked for ends.
 */
async function pauseUpstream(
  ctx: SignInContext,
  backoff: UpstreamBackoff,
  intervalSeconds: number,
): Promise<number> {
  const now = ctx.deps.clock.now();
  const asked = backoff.retryAfterSeconds !== undefined
    ? now + backoff.retryAfterSeconds * 1000
    : backoff.resumeAtEpochSeconds !== undefined
    ? backoff.resumeAtEpochSeconds * 1000
    : now + intervalSeconds * 1000;
  const until = Math.min(asked, now + MAX_PAUSE_MS);
  if (until <= now) return now;
  ctx.deps.logger.warn("upstream rate limit: polling paused", {
    requestId: ctx.requestId,
    pausedForSeconds: Math.ceil((until - now) / 1000),
  });
  await ctx.deps.store.pauseUpstream(until);
  return until;
}

async function complete(
  ctx: SignInContext,
  flow: Versioned<FlowRecord>,
  tokens: UpstreamTokenSet,
  user: UpstreamUser,
  access: SessionAccess | undefined,
): Promise<PollOutcome> {
  const deviceId = flow.value.deviceUserCodeHash;
  if (deviceId !== undefined) {
    // A `/device` sign-in: back to /device, which asks Approve / Deny (`code` names it there).
    if (!await storeDeviceFlowSignIn(ctx, flow, deviceId, { tokens, user, access })) {
      return outcome(400, { status: "expired", error: "Device code expired" });
    }
    return outcome(200, {
      status: "complete",
      redirect_uri: `${ctx.baseUrl}${PATHS.device}`,
      code: deviceId,
    });
  }
  const signIn = await storeSignIn(
    ctx,
    flow.value,
    { tokens, user, access },
    (completion) => ctx.deps.store.completeFlow(flow, completion),
  );
  // Only a flow changed under us fails here; the next poll tells the truth about it.
  if (!signIn) return PENDING;
  const { redirectUri, state } = flow.value;
  return outcome(200, {
    status: "complete",
    ...(redirectUri === undefined ? {} : { redirect_uri: redirectUri }),
    code: signIn.code,
    ...(state ? { state } : {}),
  });
}

/**
 * Spec §3.1: a terminal upstream error (the provider's `access_denied`, `expired_token`, `invalid_*`)
 * fails the flow; anything else leaves it pending. Decided by the error's code, not its text.
 */
async function upstreamFailed(
  ctx: SignInContext,
  flow: Versioned<FlowRecord>,
  error: UpstreamError,
): Promise<PollOutcome> {
  if (error.failure === "transient") {
    ctx.deps.logger.warn("upstream poll failed, staying pending", {
      requestId: ctx.requestId,
      code: error.code,
    });
    return PENDING;
  }
  await ctx.deps.store.deleteFlow(flow);
  ctx.deps.metrics.signInsFinished.inc({ mode: "device", outcome: signInFailure(error.code) });
  if (error.code === "access_denied") await denyDeviceOfFlow(ctx, flow.value, "denied at GitLab");
  return outcome(200, { status: "failed", error: error.message });
}
