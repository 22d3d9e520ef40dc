/**
 * `GET /oauth/poll`: the page asks whether the user has approved upstream; on approval the
 * session and the single-use authorization code are created in one commit.
 *
 * @see spec §3.1, §4.2, RFC 8628 §3.4–3.5
 */

import type { OAuthRequestContext } from "../http/context.ts";
import { json, NO_STORE } from "../http/responses.ts";
import { revokeAbandonedUpstreamTokens, storeSignIn } from "../sign_in/completion.ts";
import type { Versioned } from "../store/mod.ts";
import { type FlowRecord, type UpstreamTokenSet, upstreamTokenSet } from "../store/records.ts";
import {
  type DevicePollResult,
  type UpstreamBackoff,
  UpstreamError,
  type UpstreamUser,
} from "../upstream/types.ts";

/** How much the upstream's `slow_down` adds to the polling interval (RFC 8628 §3.5). */
const SLOW_DOWN_STEP_SECONDS = 5;
/** The longest pause an upstream's rate-limit headers can impose on all polling. */
const MAX_PAUSE_MS = 15 * 60_000;

/** The poll body of spec §2.4. */
export type PollBody =
  | { status: "pending" }
  | { status: "complete"; redirect_uri?: string; code: string; state?: string }
  | { status: "failed" | "expired"; error: string };

const pending = () => answer(200, { status: "pending" });

/** Handles `GET /oauth/poll`. */
export async function handlePoll(ctx: OAuthRequestContext): Promise<Response> {
  const { store, clock, config } = ctx.deps;

  const flowStates = ctx.url.searchParams.getAll("flow_state");
  if (flowStates.length > 1) {
    return answer(400, { status: "failed", error: "Repeated parameter: flow_state" });
  }
  const flowState = flowStates[0];
  if (!flowState) return answer(400, { status: "failed", error: "Missing flow_state" });

  const flow = await store.getFlow(flowState);
  if (!flow) return answer(400, { status: "expired", error: "Flow not found" });
  if (clock.now() > flow.value.expiresAt) {
    await store.deleteFlow(flow);
    return answer(400, { status: "expired", error: "Device code expired" });
  }

  // Between upstream polls (and while the upstream is paused) the page hears "pending" from KV.
  if (!flow.value.upstreamTokens && await upstreamPollWaits(ctx, flow.value)) return pending();

  // One upstream call per flow at a time, across instances: the others just see "pending".
  const lease = await store.tryLeaseFlow(flow, 2 * config.upstreamTimeoutMs + 5_000);
  if (!lease) return pending();
  try {
    // What we read may predate a poll that held the lease and finished since: the device code
    // may be spent (the upstream would answer invalid_grant) and the flow completed. Work on the
    // version current under the lease.
    const current = await store.getFlow(flowState);
    if (!current) return answer(400, { status: "expired", error: "Flow not found" });
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
  ctx: OAuthRequestContext,
  flow: Versioned<FlowRecord>,
): Promise<Response> {
  const { store, clock } = ctx.deps;
  const { upstream } = ctx.oauth;
  let tokens = flow.value.upstreamTokens;
  if (!tokens) {
    if (await upstreamPollWaits(ctx, flow.value)) return pending();
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
      if (result.backoff) await pauseUpstream(ctx, result.backoff, flow.value.intervalSeconds);
      // RFC 8628 §3.5: after slow_down the interval grows by 5 s for this and every later poll.
      const grow = result.kind === "slow_down" ? SLOW_DOWN_STEP_SECONDS : 0;
      await deferNextPoll(ctx, flow, flow.value.intervalSeconds + grow);
      return pending();
    }
    tokens = upstreamTokenSet(result.tokens, clock.now());
    // The device code is spent now; keep the token before anything else can fail.
    const saved = await store.saveFlowUpstreamTokens(flow, tokens);
    if (result.backoff) await pauseUpstream(ctx, result.backoff, flow.value.intervalSeconds);
    if (!saved) return pending();
    flow = saved;
  }
  let user: UpstreamUser;
  try {
    user = await upstream.fetchUser(tokens.accessToken);
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
  return await complete(ctx, flow, tokens, user);
}

/**
 * Whether the upstream must not be polled for this flow yet: its interval since the last
 * answer has not passed, or the upstream asked the whole service to pause.
 */
async function upstreamPollWaits(ctx: OAuthRequestContext, flow: FlowRecord): Promise<boolean> {
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
  ctx: OAuthRequestContext,
  flow: Versioned<FlowRecord>,
  intervalSeconds: number,
): Promise<void> {
  const { store, clock } = ctx.deps;
  await store.deferFlowPolling(flow, intervalSeconds, clock.now() + intervalSeconds * 1000);
}

/**
 * Pauses all upstream polling, service-wide, until the upstream's `Retry-After` or
 * `RateLimit-Reset` (one interval when it named neither; never longer than MAX_PAUSE_MS).
 */
async function pauseUpstream(
  ctx: OAuthRequestContext,
  backoff: UpstreamBackoff,
  intervalSeconds: number,
): Promise<void> {
  const now = ctx.deps.clock.now();
  const asked = backoff.retryAfterSeconds !== undefined
    ? now + backoff.retryAfterSeconds * 1000
    : backoff.resumeAtEpochSeconds !== undefined
    ? backoff.resumeAtEpochSeconds * 1000
    : now + intervalSeconds * 1000;
  const until = Math.min(asked, now + MAX_PAUSE_MS);
  if (until <= now) return;
  ctx.deps.logger.warn("upstream rate limit: polling paused", {
    requestId: ctx.requestId,
    pausedForSeconds: Math.ceil((until - now) / 1000),
  });
  await ctx.deps.store.pauseUpstream(until);
}

async function complete(
  ctx: OAuthRequestContext,
  flow: Versioned<FlowRecord>,
  tokens: UpstreamTokenSet,
  user: UpstreamUser,
): Promise<Response> {
  const signIn = await storeSignIn(
    ctx,
    flow.value,
    { tokens, user },
    (completion) => ctx.deps.store.completeFlow(flow, completion),
  );
  // Only a flow changed under us fails here; the next poll tells the truth about it.
  if (!signIn) return pending();
  const { redirectUri, state } = flow.value;
  return answer(200, {
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
  ctx: OAuthRequestContext,
  flow: Versioned<FlowRecord>,
  error: UpstreamError,
): Promise<Response> {
  if (error.failure === "transient") {
    ctx.deps.logger.warn("upstream poll failed, staying pending", {
      requestId: ctx.requestId,
      code: error.code,
    });
    return pending();
  }
  await ctx.deps.store.deleteFlow(flow);
  return answer(200, { status: "failed", error: error.message });
}

function answer(status: number, body: PollBody): Response {
  return json(body, status, NO_STORE);
}
