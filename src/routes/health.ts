/**
 * Probes for load balancers and orchestrators; they tell nothing secret.
 * `GET /healthz` (liveness): the process serves requests. `GET /readyz` (readiness): it can
 * also do its job, KV reachable and writable and OAuth configured.
 *
 * @see docs/operating.md "Health probes"
 */

import type { RequestContext } from "../http/request_context.ts";
import type { Logger } from "../logger.ts";
import type { Store } from "../store/mod.ts";

/** What the health checks use: the store, whether OAuth is configured, the logger. */
interface HealthDeps {
  store: Pick<Store, "ping">;
  oauth?: unknown;
  logger: Pick<Logger, "error">;
}
import { json, NO_STORE } from "../http/responses.ts";

/** The log line of each probe that finds KV answering but unable to do its job. */
const NOT_READY = {
  read_only: "readiness check: KV read-only",
  replaced: "readiness check: KV file replaced: the file at KV_PATH is no longer the one this " +
    "process opened (deleted or moved); what it writes goes to the file it still holds open",
};

/** A load balancer gives up after about 2 s: an unanswered ping is "unreachable" before that. */
const PING_DEADLINE_MS = 1500;

/** `work`, or a rejection once `ms` have passed without it settling. */
async function withinDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** 200 whenever the process answers, configured or not: restarting would not help. */
export function handleLiveness(_ctx: RequestContext<unknown>): Promise<Response> {
  return Promise.resolve(json({ status: "ok" }, 200, NO_STORE));
}

/**
 * 200 when KV answers and takes writes and OAuth is configured, else 503 naming the failing
 * check. A read-only database (a failover that left this instance on a standby, a full disk)
 * refuses every sign-in, refresh and rate-limit count: the instance cannot do its job. Nor can
 * one whose KV file was deleted or replaced: its writes go where no later start will look.
 */
export async function handleReadiness(ctx: RequestContext<HealthDeps>): Promise<Response> {
  const { store, oauth, logger } = ctx.deps;
  let kv: string;
  try {
    const state = await withinDeadline(store.ping(), PING_DEADLINE_MS);
    if (state !== "ok") logger.error(NOT_READY[state], { requestId: ctx.requestId });
    kv = state;
  } catch (error) {
    kv = "unreachable";
    logger.error("readiness check: KV unreachable", {
      requestId: ctx.requestId,
      error: String(error),
    });
  }
  const configuration = oauth ? "ok" : "missing";
  const ready = kv === "ok" && configuration === "ok";
  return json(
    { status: ready ? "ok" : "unavailable", checks: { kv, configuration } },
    ready ? 200 : 503,
    NO_STORE,
  );
}
