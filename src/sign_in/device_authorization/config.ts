/**
 * The device authorization endpoint's settings (RFC 8628): whether it exists, and how long a
 * device code lives.
 */

import { integerBetween, oneOf } from "../../config/parsers.ts";
import { type ConfigTable, type ValuesOf, variable } from "../../config/variable.ts";

export const DEVICE_AUTHORIZATION_VARIABLES = {
  /** `on`: `/device_authorization`, `/device` and the device_code grant exist. */
  deviceAuthorization: variable(
    "DEVICE_AUTHORIZATION",
    "on",
    oneOf("on", "off"),
    "`off`: no device authorization endpoint ([device sign-in](#headless-clients-device-authorization))",
    "`on` (strict: `off`)",
  ),
  /** Seconds a device code (and its user code) lives. */
  deviceCodeTtlSeconds: variable(
    "DEVICE_CODE_TTL",
    "600",
    integerBetween(5, 3600),
    "seconds a device code lives, 5–3600",
  ),
} satisfies ConfigTable;

/** What DEVICE_AUTHORIZATION_VARIABLES reads to. */
export type DeviceAuthorizationConfig = ValuesOf<typeof DEVICE_AUTHORIZATION_VARIABLES>;

/** Whether the device authorization endpoint, its page and its grant exist. */
export function deviceAuthorizationOn(
  config: Pick<DeviceAuthorizationConfig, "deviceAuthorization">,
): boolean {
  return config.deviceAuthorization === "on";
}
