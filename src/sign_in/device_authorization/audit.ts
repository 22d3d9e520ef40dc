/**
 * What happens to a device authorization is counted (`device_authorizations_total{outcome}`)
 * and logged once, with the client's id: started, approved, denied, expired.
 */

import type { Logger } from "../../logger.ts";
import type { DeviceAuthorizationOutcome, Metrics } from "../../metrics/catalog.ts";

/** What auditing a device authorization uses. */
export interface DeviceAuditDeps {
  logger: Pick<Logger, "info">;
  metrics: Pick<Metrics, "deviceAuthorizations">;
}

/** Counts `outcome` and writes its one log line. */
export function auditDeviceAuthorization(
  deps: DeviceAuditDeps,
  outcome: DeviceAuthorizationOutcome,
  clientId: string,
  requestId: string,
  fields: Record<string, string> = {},
): void {
  deps.metrics.deviceAuthorizations.inc({ outcome });
  deps.logger.info(`device authorization ${outcome}`, {
    requestId,
    deviceAuthorization: outcome,
    clientId,
    ...fields,
  });
}
