/**
 * `GET /authorize`: validates the authorization request, starts an upstream device flow and
 * answers the page that shows the user code (or, with GITLAB_SIGN_IN=redirect, answers the
 * consent page of the redirect sign-in: `sign_in/redirect_flow.ts`).
 *
 * @see spec §4.1, RFC 6749 §4.1.1, RFC 7636 §4.3
 */

import { matchesRegisteredRedirect } from "../clients.ts";
import type { OAuthRequestContext } from "../context.ts";
import { randomToken } from "../crypto.ts";
import { OAuthError } from "../errors.ts";
import { singleValued } from "../http.ts";
import { PKCE_METHOD } from "../pkce.ts";
import { answerRedirectSignIn } from "../sign_in/redirect_flow.ts";
import type { ClientRecord, FlowRecord } from "../store/records.ts";
import type { DeviceAuthorization } from "../upstream/types.ts";

/** Flow state size parameter (spec §8): 32 random bytes. */
const FLOW_STATE_BYTES = 32;

interface AuthorizationRequest {
  clientId: string;
  codeChallenge: string;
  state: string;
  redirectUri?: string;
}

/** Handles `GET /authorize`. */
export async function handleAuthorize(ctx: OAuthRequestContext): Promise<Response> {
  const { store, clock, templates, logger } = ctx.deps;
  const request = parseAuthorizationRequest(ctx.url.searchParams);
  const client = await store.getClient(request.clientId);
  if (ctx.deps.config.redirectUriPolicy === "registered") {
    request.redirectUri = registeredRedirectUri(request, client);
  }
  if (client) await store.recordClientUse(client);
  if (ctx.deps.config.gitlabSignIn === "redirect") {
    return await answerRedirectSignIn(ctx, request, client);
  }

  const flowState = randomToken(FLOW_STATE_BYTES);
  let device: DeviceAuthorization;
  try {
    device = await ctx.oauth.upstream.startDeviceAuthorization();
    await store.createFlow(flowState, flowRecord(request, device, clock.now()));
  } catch (error) {
    logger.error("device flow start failed", { requestId: ctx.requestId, error: String(error) });
    throw new OAuthError(500, "server_error", "Failed to initiate authentication");
  }

  const page = templates.renderDevicePage({
    userCode: device.userCode,
    verificationUrl: device.verificationUriComplete ?? device.verificationUri,
    expiresInSeconds: device.expiresInSeconds,
    flowState,
    pollUrl: `${ctx.baseUrl}/oauth/poll`,
    redirectUri: request.redirectUri,
    clientId: request.clientId,
    clientName: client?.clientName,
    issuer: ctx.baseUrl,
  });
  return new Response(page.html, {
    headers: {
      "Content-Type": "text/html; charset=utf-8",
      "Content-Security-Policy": page.contentSecurityPolicy,
      "Cache-Control": "no-store",
      "Referrer-Policy": "no-referrer",
    },
  });
}

/** The checks of spec §4.1, in its order; the first failure answers. */
function parseAuthorizationRequest(query: URLSearchParams): AuthorizationRequest {
  const params = singleValued(query);
  if (params.get("response_type") !== "code") {
    throw new OAuthError(
      400,
      "unsupported_response_type",
      "Only response_type=code is supported",
    );
  }
  const clientId = params.get("client_id");
  if (!clientId) throw new OAuthError(400, "invalid_request", "client_id is required");
  const codeChallenge = params.get("code_challenge");
  if (!codeChallenge) throw new OAuthError(400, "invalid_request", "code_challenge is required");
  if (params.get("code_challenge_method") !== PKCE_METHOD) {
    throw new OAuthError(400, "invalid_request", "code_challenge_method must be S256");
  }
  return {
    clientId,
    codeChallenge,
    state: params.get("state") ?? "",
    redirectUri: params.get("redirect_uri") || undefined,
  };
}

/**
 * Under REDIRECT_URI_POLICY=registered: the client must be registered and the redirect URI one
 * of its own (loopback ports may vary); a sole registered URI may be omitted (RFC 6749 §3.1.2.3).
 */
function registeredRedirectUri(
  request: AuthorizationRequest,
  client: ClientRecord | null,
): string {
  if (!client) throw new OAuthError(400, "invalid_request", "Unknown client_id");
  if (request.redirectUri === undefined) {
    if (client.redirectUris.length === 1) return client.redirectUris[0];
    throw new OAuthError(400, "invalid_request", "redirect_uri is required");
  }
  if (!matchesRegisteredRedirect(request.redirectUri, client.redirectUris)) {
    throw new OAuthError(400, "invalid_request", "redirect_uri is not registered for this client");
  }
  return request.redirectUri;
}

function flowRecord(
  request: AuthorizationRequest,
  device: DeviceAuthorization,
  nowMs: number,
): FlowRecord {
  return {
    deviceCode: device.deviceCode,
    userCode: device.userCode,
    verificationUri: device.verificationUri,
    verificationUriComplete: device.verificationUriComplete,
    expiresAt: nowMs + device.expiresInSeconds * 1000,
    intervalSeconds: device.intervalSeconds,
    clientId: request.clientId,
    codeChallenge: request.codeChallenge,
    codeChallengeMethod: PKCE_METHOD,
    state: request.state,
    redirectUri: request.redirectUri,
  };
}
