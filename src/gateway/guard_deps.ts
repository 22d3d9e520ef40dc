/** What the gateway's resource guard is built from (once per gateway, on its first request). */

import { createAccessGate } from "./access_gate.ts";
import type { Gateway, GatewayOAuth } from "./deps.ts";
import { CLOCK_TOLERANCE_SECONDS, type GuardDeps } from "./guard.ts";
import { liveMachineAdmission } from "./live_machine_clients.ts";

/** The resource guard's dependencies: the service's own store, upstream, signer and memory. */
export function guardDeps(gateway: Gateway, oauth: GatewayOAuth): GuardDeps {
  const { store, clock, logger, verifiedTokens, config } = gateway.deps;
  return {
    store,
    clock,
    logger,
    upstream: oauth.upstream,
    signer: oauth.signer,
    clockToleranceSeconds: CLOCK_TOLERANCE_SECONDS,
    accessTokenTtlSeconds: config.accessTokenTtlSeconds,
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    // Checked per call once the body is read (call_scopes.ts).
    requiredScope: undefined,
    verifiedTokens,
    accessGate: createAccessGate(
      config,
      () => gateway.deps.callPolicy.rules,
      gateway.ownLists,
    ),
    machineAdmission: liveMachineAdmission(gateway.deps),
  };
}
