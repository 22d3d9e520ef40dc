/**
 * `GET /authorize`: validates the authorization request, starts an upstream device flow (or
 * shows the one an identical request started moments ago, see sign_in/device.ts) and answers the
 * page that shows the user code (or, with GITLAB_SIGN_IN=redirect, answers the consent page of
 * the redirect sign-in: `sign_in/redirect_flow.ts`).
 *
 * @see spec §4.1, RFC 6749 §4.1.1, RFC 7636 §4.3
 */

import { PATHS } from "../http/paths.ts";
import { isClientMetadataUrl } from "../client_metadata/client_id.ts";
import { clientDocumentOf } from "../client_metadata/document_client.ts";
import { matchesRegisteredRedirect } from "../clients/registration.ts";
import { refuseMachineClient, requireListedGrant } from "../clients/grant_check.ts";
import type { SignInContext } from "../sign_in/deps.ts";
import { OAuthError } from "../http/errors.ts";
import { singleValued } from "../http/params.ts";
import { PKCE_METHOD } from "../sign_in/pkce.ts";
import { isAllowedRedirect } from "../clients/redirect_allow_list.ts";
import { requireServedResource } from "../http/resource.ts";
import { answerRedirectSignIn } from "../sign_in/redirect_flow.ts";
import type { ClientRecord, FlowRecord } from "../store/records.ts";
import { StoreUnavailableError } from "../store/backend.ts";
import type { DeviceAuthorization } from "../upstream/types.ts";
import { deviceFlowFor, type ShownFlow } from "../sign_in/device.ts";
import { profileFor, scopesFor } from "../sign_in/server_scopes.ts";

/** The grant a code from here is for (RFC 6749 §4.1.3). */
const AUTHORIZATION_CODE = "authorization_code";

interface AuthorizationRequest {
  clientId: string;
  codeChallenge: string;
  state: string;
  redirectUri?: string;
  /** RFC 8707 `resource`, as sent. */
  resource?: string;
}

/** Who the client is, as far as the service can tell, and where it gets the code. */
export interface IdentifiedClient {
  redirectUri?: string;
  clientName?: string;
  /** The host of a metadata document client id: its name is that host's word. */
  verifiedHost?: string;
  /** The client's registration (RFC 7591), when it has one: using it keeps it alive. */
  registration?: ClientRecord;
}

/** Handles `GET /authorize`. */
export async function handleAuthorize(ctx: SignInContext): Promise<Response> {
  const { clock, templates, logger } = ctx.deps;
  const request = parseAuthorizationRequest(ctx.url.searchParams);
  const resource = requireServedResource(
    request.resource,
    ctx.deps.servers.resources(ctx.baseUrl),
  );
  const client = await identifyClient(ctx, request);
  requireAllowedRedirect(ctx, client.redirectUri);
  // After every check: a request refused for its redirect URI is no use of the registration.
  if (client.registration) await ctx.deps.store.recordClientUse(client.registration);
  if (ctx.deps.config.upstream.signIn === "redirect") {
    return await answerRedirectSignIn(
      ctx,
      {
        ...request,
        redirectUri: client.redirectUri,
        ...impliedRedirect(request, client),
        resource,
      },
      { ...client, registered: client.registration !== undefined },
    );
  }

  let shown: ShownFlow;
  try {
    shown = await deviceFlowFor(
      ctx,
      scopesFor(ctx, resource),
      (device, nowMs) => flowRecord(request, client, resource, device, nowMs),
    );
  } catch (error) {
    // The pending-flow caps' 429: no failure of ours; a database that cannot answer now: 503.
    if (error instanceof OAuthError || error instanceof StoreUnavailableError) throw error;
    logger.error("device flow start failed", { requestId: ctx.requestId, error: String(error) });
    throw new OAuthError(500, "server_error", "Failed to initiate authentication");
  }
  const { flowState, flow } = shown;

  const page = templates.renderDevicePage({
    userCode: flow.userCode,
    verificationUrl: flow.verificationUriComplete ?? flow.verificationUri,
    // A repeated request shows the first one's flow, with what is left of its lifetime.
    expiresInSeconds: Math.max(0, Math.ceil((flow.expiresAt - clock.now()) / 1000)),
    flowState,
    pollUrl: `${ctx.baseUrl}${PATHS.poll}`,
    // The stored flow's: a failed sign-in's return link goes to what /authorize validated.
    redirectUri: flow.redirectUri,
    state: flow.state,
    clientId: request.clientId,
    clientName: client.clientName,
    clientVerifiedHost: client.verifiedHost,
    clientRegistered: client.registration !== undefined,
    issuer: ctx.baseUrl,
    upstream: profileFor(ctx, resource),
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
    // Sent without a value is as if omitted (RFC 6749 §3.1), as at /token.
    resource: params.get("resource") || undefined,
  };
}

/**
 * A metadata document client is held to its document's redirect URIs under every policy (it is
 * the client's own word); a registered one to its registration under REDIRECT_URI_POLICY=
 * registered; otherwise the redirect URI is taken as given (spec §4.1). A known client without
 * the authorization_code grant (a device-only registration or document, a machine client) is
 * refused first: the code would be of no use to it, and its redirect URI is no one's to trust.
 */
async function identifyClient(
  ctx: SignInContext,
  request: AuthorizationRequest,
): Promise<IdentifiedClient> {
  if (isClientMetadataUrl(request.clientId)) return await documentClient(ctx, request);
  const client = await ctx.deps.store.getClient(request.clientId);
  if (client) requireListedGrant(client.metadata.grant_types, AUTHORIZATION_CODE);
  else await refuseMachineClient(ctx.deps.store, request.clientId);
  if (ctx.deps.config.redirectUriPolicy !== "registered") {
    return {
      redirectUri: request.redirectUri,
      clientName: client?.clientName,
      registration: client ?? undefined,
    };
  }
  if (!client) throw new OAuthError(400, "invalid_request", "Unknown client_id");
  return {
    redirectUri: ownRedirectUri(request.redirectUri, client.redirectUris, "registered"),
    clientName: client.clientName,
    registration: client,
  };
}

async function documentClient(
  ctx: SignInContext,
  request: AuthorizationRequest,
): Promise<IdentifiedClient> {
  const document = await clientDocumentOf(ctx.deps, request.clientId);
  requireListedGrant(document.grantTypes ?? ctx.deps.grantTypes.defaults, AUTHORIZATION_CODE);
  const patterns = ctx.deps.config.allowedRedirectUris;
  if (patterns && !document.redirectUris.some((uri) => isAllowedRedirect(uri, patterns))) {
    throw new OAuthError(
      400,
      "invalid_request",
      "Client metadata document: none of its redirect_uris is allowed by this service",
    );
  }
  return {
    redirectUri: ownRedirectUri(request.redirectUri, document.redirectUris, "listed"),
    clientName: document.clientName,
    verifiedHost: new URL(request.clientId).host,
  };
}

/**
 * The redirect URI when it is one of the client's own (loopback ports may vary); a sole one may
 * be omitted (RFC 6749 §3.1.2.3).
 */
function ownRedirectUri(
  requested: string | undefined,
  own: string[],
  how: "registered" | "listed",
): string {
  if (requested === undefined) {
    if (own.length === 1) return own[0];
    throw new OAuthError(400, "invalid_request", "redirect_uri is required");
  }
  if (!matchesRegisteredRedirect(requested, own)) {
    throw new OAuthError(
      400,
      "invalid_request",
      how === "registered"
        ? "redirect_uri is not registered for this client"
        : "redirect_uri is not listed in the client's metadata document",
    );
  }
  return requested;
}

/** ALLOWED_REDIRECT_URIS, when set: the operator's list of clients that may sign users in. */
function requireAllowedRedirect(ctx: SignInContext, redirectUri: string | undefined): void {
  const patterns = ctx.deps.config.allowedRedirectUris;
  if (!patterns || redirectUri === undefined || isAllowedRedirect(redirectUri, patterns)) return;
  throw new OAuthError(400, "invalid_request", "redirect_uri is not allowed by this service");
}

function flowRecord(
  request: AuthorizationRequest,
  client: IdentifiedClient,
  resource: string,
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
    redirectUri: client.redirectUri,
    ...impliedRedirect(request, client),
    resource,
  };
}

/** Marks a redirect URI the client did not name (its sole registered one). */
function impliedRedirect(
  request: AuthorizationRequest,
  client: IdentifiedClient,
): { redirectUriImplied?: true } {
  return request.redirectUri === undefined && client.redirectUri !== undefined
    ? { redirectUriImplied: true }
    : {};
}
