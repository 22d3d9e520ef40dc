/**
 * `GET /metrics` (only with METRICS_TOKEN set): this process's metrics in the Prometheus text
 * format, for a scraper presenting `Authorization: Bearer <METRICS_TOKEN>`; 401 otherwise.
 */

import { bearerToken } from "../http/bearer_token.ts";
import { timingSafeEqual } from "../crypto.ts";
import type { RequestContext } from "../http/request_context.ts";
import type { Metrics } from "../metrics/catalog.ts";

/** What `/metrics` uses: its token, and the metrics it renders. */
interface MetricsDeps {
  config: { metricsToken?: string };
  metrics: Pick<Metrics, "render">;
}
import { OAuthError } from "../http/errors.ts";

/** The exposition format's content type. */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Handles `GET /metrics`. */
export async function handleMetrics(ctx: RequestContext<MetricsDeps>): Promise<Response> {
  const token = ctx.deps.config.metricsToken;
  if (token === undefined || !presentsToken(ctx.request, token)) {
    throw new OAuthError(401, "invalid_token", "Metrics need the metrics bearer token", {
      "WWW-Authenticate": 'Bearer realm="metrics"',
    });
  }
  return new Response(await ctx.deps.metrics.render(), {
    headers: { "Content-Type": METRICS_CONTENT_TYPE, "Cache-Control": "no-store" },
  });
}

/** Whether the request's `Authorization` is `Bearer <token>` (compared in constant time). */
function presentsToken(request: Request, token: string): boolean {
  const presented = bearerToken(request.headers.get("authorization"));
  return presented !== undefined && timingSafeEqual(presented, token);
}
