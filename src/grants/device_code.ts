/**
 * The device code grant (RFC 8628 §3.4–3.5): the client polls with its device code until the
 * user approved at `/device`; then, once, the same tokens as the code grant (the sign-in's
 * session, its resource, lifetimes and refresh rotation).
 *
 * @see docs/mcp-clients.md "Headless clients: device authorization"
 */

import { deviceAuthorizationOn } from "../sign_in/device_authorization/config.ts";
import { auditDeviceAuthorization } from "../sign_in/device_authorization/audit.ts";
import { OAuthError } from "../http/errors.ts";
import { DEVICE_CODE_GRANT_TYPE } from "../http/grant_types.ts";
import type { Versioned } from "../store/mod.ts";
import type { DeviceAuthorizationRecord } from "../store/records.ts";
import type { Grant, GrantDeps, GrantRequest, Issued } from "./grant.ts";
import {
  invalidGrant,
  issueForSession,
  requireSameClient,
  sessionTokens,
} from "./session_checks.ts";

/** How much each `slow_down` adds to the code's interval (RFC 8628 §3.5). */
export const SLOW_DOWN_STEP_SECONDS = 5;

/** The grant's module. */
export const DEVICE_CODE_GRANT: Grant = {
  type: DEVICE_CODE_GRANT_TYPE,
  registrable: "on request",
  enabled: deviceAuthorizationOn,
  issue: redeemDeviceCode,
};

async function redeemDeviceCode(deps: GrantDeps, request: GrantRequest): Promise<Issued> {
  const { store, clock } = deps;
  const deviceCode = request.params.get("device_code");
  if (!deviceCode) throw new OAuthError(400, "invalid_request", "device_code is required");
  const clientId = request.client.clientId;
  if (!clientId) throw new OAuthError(400, "invalid_request", "client_id is required");

  const found = await store.getDeviceAuthorization(deviceCode);
  if (!found || found.value.clientId !== clientId) throw invalidGrant("Invalid device code");
  // As the code and refresh grants: a client deleted since (`clients delete`) gets no tokens.
  if (deps.config.redirectUriPolicy === "registered") {
    await requireSameClient(deps, clientId, found.value.clientId, "device code");
  }
  const now = clock.now();
  if (now > found.value.expiresAt) {
    if (await store.deleteDeviceAuthorization(found)) {
      auditDeviceAuthorization(deps, "expired", found.value.clientId, request.requestId);
    }
    throw new OAuthError(400, "expired_token", "The device code has expired");
  }
  const polled = await recordPoll(deps, deviceCode, found, now);
  switch (polled.value.status) {
    case "pending":
    case "signed_in":
      throw new OAuthError(400, "authorization_pending", "The user has not approved yet");
    case "denied":
      await store.deleteDeviceAuthorization(polled);
      throw new OAuthError(400, "access_denied", "The user denied the authorization");
    case "approved":
      return await redeemApproved(deps, request, polled);
  }
}

/**
 * Counts the poll: one sooner than the interval after the previous poll answers `slow_down`
 * (never the first poll); a concurrent poll of the same code that changed it first is such a
 * poll too.
 */
async function recordPoll(
  deps: GrantDeps,
  deviceCode: string,
  device: Versioned<DeviceAuthorizationRecord>,
  now: number,
): Promise<Versioned<DeviceAuthorizationRecord>> {
  const { lastPollAt, intervalSeconds, status } = device.value;
  if (lastPollAt !== undefined && now - lastPollAt < intervalSeconds * 1000) {
    return await slowDown(deps, deviceCode, device, now);
  }
  // The redemption's own commit is checked against this version: one winner, the rest lose.
  if (status === "approved") return device;
  const updated = await deps.store.updateDeviceAuthorization(device, {
    ...device.value,
    lastPollAt: now,
  });
  return updated ?? await slowDown(deps, deviceCode, device, now);
}

/** Attempts at adding to the interval of a code that concurrent polls keep changing. */
const SLOW_DOWN_ATTEMPTS = 3;

/**
 * Answers `slow_down` having added 5 s to the code's interval for this and every later poll
 * (RFC 8628 §3.5), on the record as it is now: a concurrent poll may have changed it. An
 * approved code is left as it is: a write would fail a concurrent poll's redemption, which is
 * checked against the version it read.
 */
async function slowDown(
  deps: GrantDeps,
  deviceCode: string,
  device: Versioned<DeviceAuthorizationRecord>,
  now: number,
): Promise<never> {
  let current: Versioned<DeviceAuthorizationRecord> | null = device;
  for (let attempt = 0; attempt < SLOW_DOWN_ATTEMPTS; attempt++) {
    if (!current || current.value.status === "approved") break;
    const raised = await deps.store.updateDeviceAuthorization(current, {
      ...current.value,
      intervalSeconds: current.value.intervalSeconds + SLOW_DOWN_STEP_SECONDS,
      lastPollAt: now,
    });
    if (raised) break;
    current = await deps.store.getDeviceAuthorization(deviceCode);
  }
  throw new OAuthError(400, "slow_down", "Polling too fast: wait the interval, now 5 s longer");
}

/** Issues the approved sign-in's first tokens and consumes the device code, in one commit. */
async function redeemApproved(
  deps: GrantDeps,
  request: GrantRequest,
  device: Versioned<DeviceAuthorizationRecord>,
): Promise<Issued> {
  const { store } = deps;
  const sessionId = device.value.sessionId;
  const session = sessionId === undefined ? null : await store.getSession(sessionId);
  if (!session) throw invalidGrant("Invalid device code");
  const issued = await issueForSession(deps, request, session.value);
  if (!await store.redeemDeviceAuthorization(device, session, issued.session)) {
    // A concurrent poll of the same code won the commit.
    throw invalidGrant("Invalid device code");
  }
  return sessionTokens(issued.session, issued.body);
}
