/**
 * The device flow an `/authorize` page shows: a new one started at the upstream, or, when the
 * identical request (every parameter, on the same base URL, from the same client address)
 * arrived within the last 60 seconds and its flow is still live, that same flow. A double redirect, a prefetch or a reload then
 * costs the upstream nothing and leaves no abandoned device flow behind.
 *
 * Once the first flow is complete, failed or expired, the same request starts a fresh flow (and
 * the next 60 seconds share that one): the old page has nothing left to show.
 *
 * @see spec §4.1, RFC 8628 §3.1–3.2, README "Where the spec is silent"
 */

import type { OAuthRequestContext } from "../http/context.ts";
import { randomToken, sha256Base64Url } from "../crypto.ts";
import type { RepeatRecord, Versioned } from "../store/mod.ts";
import type { FlowRecord } from "../store/records.ts";
import type { DeviceAuthorization } from "../upstream/types.ts";

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
  ctx: OAuthRequestContext,
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
    return await startClaimed(ctx, claim, requestHash, recordOf);
  }
  return await startFlow(ctx, randomToken(FLOW_STATE_BYTES), recordOf);
}

/** Starts the flow a claim names and tells identical requests it is there. */
async function startClaimed(
  ctx: OAuthRequestContext,
  claim: Versioned<RepeatRecord>,
  requestHash: string,
  recordOf: FlowRecordOf,
): Promise<ShownFlow> {
  let shown: ShownFlow;
  try {
    shown = await startFlow(
      ctx,
      claim.value.flowState,
      (device, nowMs) => ({ ...recordOf(device, nowMs), requestHash }),
    );
  } catch (error) {
    await ctx.deps.store.dropRepeat(claim);
    throw error;
  }
  await ctx.deps.store.markRepeatStarted(claim);
  return shown;
}

async function startFlow(
  ctx: OAuthRequestContext,
  flowState: string,
  recordOf: FlowRecordOf,
): Promise<ShownFlow> {
  const device = await ctx.oauth.upstream.startDeviceAuthorization();
  const flow = recordOf(device, ctx.deps.clock.now());
  await ctx.deps.store.createFlow(flowState, flow);
  return { flowState, flow };
}

/** The repeated request's flow, while it lives and is not yet done. */
async function liveFlowOf(
  ctx: OAuthRequestContext,
  repeat: RepeatRecord,
): Promise<ShownFlow | null> {
  if (!repeat.started) return null;
  const flow = await ctx.deps.store.getFlow(repeat.flowState);
  if (!flow || ctx.deps.clock.now() > flow.value.expiresAt) return null;
  return { flowState: repeat.flowState, flow: flow.value };
}

/** Whether the first request is still starting its flow (and has not died doing so). */
function isStarting(ctx: OAuthRequestContext, repeat: RepeatRecord): boolean {
  const { clock, config } = ctx.deps;
  return !repeat.started && clock.now() - repeat.claimedAt <= config.upstreamTimeoutMs;
}

/**
 * The hash of the whole authorization request: every parameter (order aside) and the base URL,
 * so a different `state` or `code_challenge` is a different request.
 */
function requestHashOf(ctx: OAuthRequestContext): string {
  const params = [...ctx.url.searchParams].sort(([a, x], [b, y]) =>
    a === b ? (x < y ? -1 : x > y ? 1 : 0) : (a < b ? -1 : 1)
  );
  // The client's address too: whoever else holds the URL (a proxy log, a synced history) must
  // not be shown the same user code, which they could approve with their own GitLab account.
  return sha256Base64Url(JSON.stringify([ctx.baseUrl, ctx.clientAddress(), params]));
}
