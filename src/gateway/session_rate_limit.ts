/**
 * RATE_LIMIT_MCP: MCP messages per sign-in session and fixed window at the gateway, loopback
 * clients included (a session is someone signed in, wherever they call from). A registered
 * machine client has no session: its messages count per client, whatever token carries them (it
 * gets a new one per `client_credentials` request); a CI job's per token, its job's own. The count lives in
 * the store, so it holds across instances, but a request does not write it: each process claims
 * the window's allowance from the store a slice at a time (a twentieth of the limit) and spends
 * it in memory, so a busy session costs one store commit per slice, not one per message. The
 * store never grants more than the limit in a window, all processes together; a process holding
 * an unspent slice can make another refuse up to that many messages early.
 */

import type { Clock } from "../clock.ts";
import type { RateLimit } from "../http/rate_limit.ts";
import type { Metrics } from "../metrics/catalog.ts";
import type { Store } from "../store/mod.ts";
import type { MachineCaller } from "../machine/caller.ts";
import { tooManyRequests } from "../http/rate_limit.ts";

/** The bucket RATE_LIMIT_MCP counts in (its key in the store, its metrics label). */
const BUCKET = "mcp";
/** The allowance a process claims at once: this fraction of the limit. */
const SLICES = 20;

/** Who sends the messages: a session (a person's, or a machine token's own `sid`), or a client. */
export interface RateLimited {
  sessionId: string;
  machine?: Pick<MachineCaller, "kind" | "clientId">;
}

/** Spends a caller's allowance; refuses with 429 and `Retry-After` past the limit. */
export interface SessionRateLimit {
  /**
   * Counts `messages` against the caller's limit: nothing (at once) while this process holds
   * allowance enough, else a promise of the store's claim; throws or rejects with a 429
   * OAuthError over the limit.
   */
  take(caller: RateLimited, messages: number): void | Promise<void>;
}

/** The key a caller's messages count under. */
function countedAs(caller: RateLimited): string {
  return caller.machine?.kind === "client"
    ? `client:${caller.machine.clientId}`
    : `session:${caller.sessionId}`;
}

/** What a process holds of one session's allowance in the current window. */
interface Allowance {
  left: number;
  /** The store granted all there is this window: no need to ask it again. */
  exhausted: boolean;
}

/** The limiter of `limit`, or undefined when RATE_LIMIT_MCP is `off`. */
export function createSessionRateLimit(
  deps: { store: Store; clock: Clock; metrics: Pick<Metrics, "rateLimitRefusals"> },
  limit: RateLimit | undefined,
): SessionRateLimit | undefined {
  if (!limit) return undefined;
  const windowMs = limit.windowSeconds * 1000;
  const slice = Math.max(1, Math.floor(limit.limit / SLICES));
  let window = Number.NaN;
  let allowances = new Map<string, Allowance>();

  /** The allowances of the current window: every session's is forgotten when it ends. */
  const current = (): Map<string, Allowance> => {
    const now = Math.floor(deps.clock.now() / windowMs);
    if (now !== window) {
      window = now;
      allowances = new Map();
    }
    return allowances;
  };

  const spend = (allowance: Allowance, messages: number): void => {
    if (allowance.left >= messages) {
      allowance.left -= messages;
      return;
    }
    deps.metrics.rateLimitRefusals.inc({ bucket: BUCKET });
    const now = deps.clock.now();
    throw tooManyRequests(Math.ceil((windowMs - (now % windowMs)) / 1000));
  };

  const claim = async (allowance: Allowance, key: string, messages: number) => {
    const wanted = Math.max(slice, messages - allowance.left);
    const granted = await deps.store.claimRequests(
      BUCKET,
      key,
      wanted,
      limit.limit,
      windowMs,
    );
    allowance.left += granted;
    if (granted < wanted) allowance.exhausted = true;
    spend(allowance, messages);
  };

  return {
    take(caller, messages) {
      const held = current();
      const key = countedAs(caller);
      let allowance = held.get(key);
      if (allowance === undefined) {
        allowance = { left: 0, exhausted: false };
        held.set(key, allowance);
      }
      if (allowance.left >= messages || allowance.exhausted) return spend(allowance, messages);
      return claim(allowance, key, messages);
    },
  };
}
