/**
 * "Continue" under GITLAB_SIGN_IN=device: a GitLab device flow of its own (never shared with
 * another request), shown on the same page `/authorize` shows; its completion returns the
 * browser to `/device`, which asks Approve / Deny.
 */

import { PATHS } from "../../http/paths.ts";
import { startFlow } from "../device.ts";
import { profileFor, scopesFor } from "../server_scopes.ts";
import type { SignInContext } from "../deps.ts";
import type { DeviceAuthorizationRecord } from "../../store/records.ts";
import { htmlPage } from "./page.ts";
import { signInRequestOf } from "./sign_in.ts";
import type { DeviceClient } from "./client.ts";

/** Starts the GitLab device flow of this authorization's sign-in and answers its page. */
export async function continueWithDeviceFlow(
  ctx: SignInContext,
  device: DeviceAuthorizationRecord,
  client: DeviceClient,
): Promise<Response> {
  const returnTo = `${ctx.baseUrl}${PATHS.device}`;
  const { flowState, flow } = await startFlow(
    ctx,
    scopesFor(ctx, device.resource),
    (upstream, nowMs) => ({
      ...signInRequestOf(device),
      deviceCode: upstream.deviceCode,
      userCode: upstream.userCode,
      verificationUri: upstream.verificationUri,
      verificationUriComplete: upstream.verificationUriComplete,
      expiresAt: nowMs + upstream.expiresInSeconds * 1000,
      intervalSeconds: upstream.intervalSeconds,
      state: "",
      redirectUri: returnTo,
      deviceUserCodeHash: device.userCodeHash,
    }),
  );
  const page = ctx.deps.templates.renderDevicePage({
    userCode: flow.userCode,
    verificationUrl: flow.verificationUriComplete ?? flow.verificationUri,
    expiresInSeconds: Math.max(0, Math.ceil((flow.expiresAt - ctx.deps.clock.now()) / 1000)),
    flowState,
    pollUrl: `${ctx.baseUrl}${PATHS.poll}`,
    // Its "Return" link after a failure names the authorization, so /device can say what happened.
    redirectUri: `${returnTo}?code=${device.userCodeHash}`,
    clientId: device.clientId,
    clientName: client.clientName,
    clientVerifiedHost: client.verifiedHost,
    clientRegistered: client.registration !== undefined,
    upstream: profileFor(ctx, device.resource),
  });
  return htmlPage(page, 200);
}
