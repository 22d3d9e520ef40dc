/**
 * `POST /device_authorization` (RFC 8628 §3.1–3.2): a client without a browser asks for a
 * device code to poll `/token` with, and a user code for its user to enter at `/device`.
 *
 * @see docs/mcp-clients.md "Headless clients: device authorization"
 */

import { randomToken } from "../crypto.ts";
import { auditDeviceAuthorization } from "../sign_in/device_authorization/audit.ts";
import { identifyDeviceClient } from "../sign_in/device_authorization/client.ts";
import { newUserCode } from "../sign_in/device_authorization/user_code.ts";
import { OAuthError } from "../http/errors.ts";
import { readParams, withinParameterLength, withValues } from "../http/params.ts";
import { PATHS } from "../http/paths.ts";
import { requireServedResource } from "../http/resource.ts";
import { json, NO_STORE } from "../http/responses.ts";
import { GRANTED_SCOPES } from "../scopes.ts";
import type { SignInContext } from "../sign_in/deps.ts";

/** Device code size (RFC 8628 §5.2 wants it unguessable): 32 random bytes, 256 bits. */
const DEVICE_CODE_BYTES = 32;
/** The polling interval a new device code starts with (RFC 8628 §3.2's default). */
export const DEVICE_POLL_INTERVAL_SECONDS = 5;
/** User codes drawn before giving up on a free one (a collision is a 1-in-10^10 event). */
const USER_CODE_ATTEMPTS = 5;

/** Handles `POST /device_authorization`. */
export async function handleDeviceAuthorization(ctx: SignInContext): Promise<Response> {
  const { config, store, clock } = ctx.deps;
  // A form's endpoint of OAuth: a parameter sent without a value is as if omitted (RFC 6749 §3.1).
  // What it stores and logs (client_id, scope) is held to /authorize's limit on its query.
  const params = withinParameterLength(
    withValues(await readParams(ctx.request, config.requestBodyTimeoutMs)),
  );
  const clientId = params.get("client_id");
  if (!clientId) throw new OAuthError(400, "invalid_request", "client_id is required");
  const scope = requireServedScopes(params.get("scope"));
  const resource = requireServedResource(
    params.get("resource"),
    ctx.deps.servers.resources(ctx.baseUrl),
  );
  const client = await identifyDeviceClient(ctx.deps, clientId);
  if (client.registration) await store.recordClientUse(client.registration);

  const deviceCode = randomToken(DEVICE_CODE_BYTES);
  const expiresAt = clock.now() + config.deviceCodeTtlSeconds * 1000;
  const userCode = await storeWithFreeUserCode(ctx, deviceCode, {
    clientId,
    ...(scope === undefined ? {} : { scope }),
    resource,
    expiresAt,
    intervalSeconds: DEVICE_POLL_INTERVAL_SECONDS,
    status: "pending",
  });
  auditDeviceAuthorization(ctx.deps, "started", clientId, ctx.requestId);
  const verificationUri = `${ctx.baseUrl}${PATHS.device}`;
  return json(
    {
      device_code: deviceCode,
      user_code: userCode,
      verification_uri: verificationUri,
      verification_uri_complete: `${verificationUri}?user_code=${userCode}`,
      expires_in: config.deviceCodeTtlSeconds,
      interval: DEVICE_POLL_INTERVAL_SECONDS,
    },
    200,
    NO_STORE,
  );
}

/** The `scope` asked, when every one of its scopes is served; else `invalid_scope`. */
function requireServedScopes(scope: string | undefined): string | undefined {
  if (scope === undefined) return undefined;
  const asked = scope.split(" ").filter((item) => item !== "");
  const served: readonly string[] = GRANTED_SCOPES;
  const unknown = asked.filter((item) => !served.includes(item));
  if (unknown.length > 0) {
    throw new OAuthError(
      400,
      "invalid_scope",
      `Unknown scope ${unknown[0].slice(0, 100)}; this service grants ${served.join(" ")}`,
    );
  }
  return asked.length > 0 ? asked.join(" ") : undefined;
}

/** Stores the authorization under a user code nobody else holds; that user code. */
async function storeWithFreeUserCode(
  ctx: SignInContext,
  deviceCode: string,
  record: Parameters<SignInContext["deps"]["store"]["createDeviceAuthorization"]>[2],
): Promise<string> {
  for (let attempt = 0; attempt < USER_CODE_ATTEMPTS; attempt++) {
    const userCode = newUserCode();
    if (await ctx.deps.store.createDeviceAuthorization(deviceCode, userCode, record)) {
      return userCode;
    }
  }
  throw new OAuthError(503, "temporarily_unavailable", "No free user code; try again");
}
