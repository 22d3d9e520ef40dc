/**
 * The caps on pending device flows (MAX_PENDING_FLOWS in all, MAX_PENDING_FLOWS_PER_PREFIX per
 * client IPv4 /24 or IPv6 /56), checked before a new flow is started at the upstream. Over a cap
 * the answer is 429 `temporarily_unavailable` with `Retry-After` until the first of the counted
 * flows expires. Loopback clients are exempt under RATE_LIMIT_LOOPBACK=exempt, like every
 * per-client limit; their flows still count in all.
 *
 * @see README "Abuse limits"
 */

import type { SignInContext } from "./deps.ts";
import { OAuthError } from "../http/errors.ts";
import { clientPrefix, isLoopbackIp } from "../http/ip_address.ts";

/**
 * The client prefix a new flow is counted under (undefined: an exempt client), once the caps
 * leave room for it; throws the 429 when they do not.
 */
export async function admitNewFlow(ctx: SignInContext): Promise<string | undefined> {
  const { config, store, clock } = ctx.deps;
  const address = ctx.clientAddress();
  if (config.rateLimitLoopback === "exempt" && isLoopbackIp(address)) return undefined;
  const prefix = clientPrefix(address);
  const pending = await store.countPendingFlows(prefix);
  if (pending.ofPrefix >= config.maxPendingFlowsPerPrefix) {
    throw tooManyPending(pending.firstOfPrefixEndsAt - clock.now(), "from your network");
  }
  if (pending.all >= config.maxPendingFlows) {
    throw tooManyPending(pending.firstEndsAt - clock.now(), "");
  }
  return prefix;
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
