/** `GET /healthz`: for load balancers and orchestrators; tells nothing secret. */

import type { RequestContext } from "../context.ts";
import { json } from "../http.ts";

/** 200 when KV answers and OAuth is configured, else 503 with which check failed. */
export async function handleHealth(ctx: RequestContext): Promise<Response> {
  const { store, oauth, logger } = ctx.deps;
  let kv = "ok";
  try {
    await store.ping();
  } catch (error) {
    kv = "unreachable";
    logger.error("health check: KV unreachable", {
      requestId: ctx.requestId,
      error: String(error),
    });
  }
  const configuration = oauth ? "ok" : "missing";
  const healthy = kv === "ok" && configuration === "ok";
  return json(
    { status: healthy ? "ok" : "unavailable", checks: { kv, configuration } },
    healthy ? 200 : 503,
    { "Cache-Control": "no-store" },
  );
}
