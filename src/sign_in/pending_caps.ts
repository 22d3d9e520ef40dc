/**
 * The caps on pending device flows (MAX_PENDING_FLOWS in all, MAX_PENDING_FLOWS_PER_PREFIX per
 * client IPv4 /24 or IPv6 /56), checked before a new flow is started at the upstream. Over a cap
 * the answer is 429 `temporarily_unavailable` with `Retry-After` until the first of the counted
 * flows expires. Clients the per-address limits exempt (loopback under RATE_LIMIT_LOOPBACK=exempt,
 * RATE_LIMIT_EXEMPT) are exempt here too; their flows still count in all.
 *
 * @see docs/security.md "Abuse limits"
 */

import type { SignInContext } from "./deps.ts";
import { OAuthError } from "../http/errors.ts";
import { clientPrefix } from "../http/ip_address.ts";
import type { FlowRecord } from "../store/records.ts";

/** How a new flow is counted: under its client's prefix, or exempt (see FlowRecord). */
export type FlowCounting = Pick<FlowRecord, "clientPrefix" | "exemptFromShare">;

/**
 * How a new flow is counted, once the caps leave room for it; throws the 429 when they do not.
 * An exempt client's flow has no prefix; a RATE_LIMIT_EXEMPT one's polls still spend the budget.
 */
export async function admitNewFlow(ctx: SignInContext): Promise<FlowCounting> {
  const { config, store, clock } = ctx.deps;
  const client = ctx.limitedClient();
  if ("exempt" in client) return client.exempt === "listed" ? { exemptFromShare: true } : {};
  const prefix = clientPrefix(client.counted);
  const pending = await store.countPendingFlows(prefix);
  if (pending.ofPrefix >= config.maxPendingFlowsPerPrefix) {
    throw tooManyPending(pending.firstOfPrefixEndsAt - clock.now(), "from your network");
  }
  if (pending.all >= config.maxPendingFlows) {
    throw tooManyPending(pending.firstEndsAt - clock.now(), "");
  }
  return { clientPrefix: prefix };
}

function tooManyPending(untilFreeMs: number, from: string): OAuthError {
  const retryAfter = String(Math.max(1, Math.ceil(untilFreeMs / 1000)));
  return new OAuthError(
    429,
    "temporarily_unavailable",
    `Too many sign-ins pending${
      from ? ` ${from}` : ""
    }; try again in at most ${retryAfter} seconds`,
    { "Retry-After": retryAfter },
  );
}
