/**
 * `GET /oauth/poll`: the page asks whether the user has approved upstream; on approval the
 * session and the single-use authorization code are created in one commit.
 *
 * @see spec §3.1, §4.2, RFC 8628 §3.4–3.5
 */

import type { OAuthRequestContext } from "../context.ts";
import { json, NO_STORE } from "../http.ts";
import { redact } from "../logger.ts";
import { endDepsOf, sweepAbandonedSignIns } from "../session/end.ts";
import { newSignIn } from "../session/life.ts";
import type { Versioned } from "../store/mod.ts";
import { type FlowRecord, type UpstreamTokenSet, upstreamTokenSet } from "../store/records.ts";
import { UpstreamError, type UpstreamUser } from "../upstream/types.ts";

/** How much the upstream's `slow_down` adds to the polling interval (RFC 8628 §3.5). */
const SLOW_DOWN_STEP_SECONDS = 5;

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
    if (clock.now() < (flow.value.nextPollAt ?? 0)) return pending();
    const result = await upstream.pollDeviceToken(flow.value.deviceCode);
    if (result.kind === "slow_down") {
      // RFC 8628 §3.5: the interval grows by 5 s for this and every later request.
      const interval = flow.value.intervalSeconds + SLOW_DOWN_STEP_SECONDS;
      await store.deferFlowPolling(flow, interval, clock.now() + interval * 1000);
    }
    if (result.kind !== "token") return pending();
    tokens = upstreamTokenSet(result.tokens, clock.now());
    // The device code is spent now; keep the token before anything else can fail.
    const saved = await store.saveFlowUpstreamTokens(flow, tokens);
    if (!saved) return pending();
    flow = saved;
  }
  let user: UpstreamUser;
  try {
    user = await upstream.fetchUser(tokens.accessToken);
  } catch (error) {
    // Fail the flow as saved with the tokens, not the version the caller read.
    if (!(error instanceof UpstreamError)) throw error;
    return await upstreamFailed(ctx, flow, error);
  }
  return await complete(ctx, flow, tokens, user);
}

async function complete(
  ctx: OAuthRequestContext,
  flow: Versioned<FlowRecord>,
  tokens: UpstreamTokenSet,
  user: UpstreamUser,
): Promise<Response> {
  const { store, clock, logger } = ctx.deps;
  const sealedTokens = await store.sealUpstreamTokens(tokens);
  const signIn = newSignIn(
    flow.value,
    { sealedTokens, expiresAt: tokens.expiresAt, user },
    clock.now(),
  );
  const done = await store.completeFlow(flow, signIn);
  // Only a flow changed under us fails here; the next poll tells the truth about it.
  if (!done) return pending();
  await sweepAbandonedSignIns(endDepsOf(ctx), { requestId: ctx.requestId });
  const { code, session } = signIn;
  const { redirectUri, state } = flow.value;
  logger.info("flow completed", {
    requestId: ctx.requestId,
    sessionId: session.id,
    clientId: session.clientId,
    gitlabUser: user.username,
    code: redact(code),
  });
  return answer(200, {
    status: "complete",
    ...(redirectUri === undefined ? {} : { redirect_uri: redirectUri }),
    code,
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
