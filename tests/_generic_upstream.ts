/**
 * A second `Upstream`, for tests only: a generic RFC 8628 provider whose endpoints, user fields
 * and quirks are options. It is built from the provider-neutral client (src/upstream/oauth_http.ts)
 * alone, the way a GitHub or Keycloak module would be, and proves that nothing above
 * src/upstream/ needs to know which provider signs users in.
 */

import {
  authorizationUrl,
  createOAuthHttpClient,
  DEVICE_CODE_GRANT_TYPE,
  endpointBelow,
  httpFailure,
  malformed,
  type OAuthQuirks,
  parseJsonObject,
  processDeviceAuthorizationResponse,
  processDeviceTokenResponse,
  processRevocationResponse,
  processTokenResponse,
  readBody,
  requireNonEmptyString,
} from "../src/upstream/oauth_http.ts";
import { type Upstream, UpstreamError, type UpstreamUser } from "../src/upstream/types.ts";

/** Where a generic provider has its endpoints, below its base URL. */
export interface GenericEndpoints {
  deviceAuthorization: string;
  authorize: string;
  token: string;
  user: string;
  revoke: string;
}

/** Options of `createGenericUpstream`. */
export interface GenericUpstreamOptions {
  displayName: string;
  baseUrl: URL;
  endpoints: GenericEndpoints;
  clientId: string;
  scopes: string;
  /** The user API's members holding the numeric id and the username. */
  userFields: { id: string; username: string };
  quirks?: OAuthQuirks;
  timeoutMs?: number;
}

/** A generic RFC 8628 / RFC 6749 provider. */
export function createGenericUpstream(options: GenericUpstreamOptions): Upstream {
  const { clientId, scopes, quirks, userFields } = options;
  const { send, postForm, call } = createOAuthHttpClient({ timeoutMs: options.timeoutMs ?? 5000 });
  const at = (path: string) => endpointBelow(options.baseUrl, path);
  const endpoints = {
    deviceAuthorization: at(options.endpoints.deviceAuthorization),
    authorize: at(options.endpoints.authorize),
    token: at(options.endpoints.token),
    user: at(options.endpoints.user),
    revoke: at(options.endpoints.revoke),
  };

  async function processUser(response: Response): Promise<UpstreamUser> {
    const body = await readBody(response);
    if (response.status === 401 || response.status === 403) {
      throw new UpstreamError("terminal", "invalid_token", "invalid_token", response.status);
    }
    if (response.status !== 200) throw httpFailure(response.status);
    const json = parseJsonObject(body, "user");
    const id = json[userFields.id];
    if (typeof id !== "number" || !Number.isSafeInteger(id)) throw malformed("user");
    return { id, username: requireNonEmptyString(json[userFields.username], "user") };
  }

  return {
    profile: { displayName: options.displayName, url: options.baseUrl, scopes },
    authorizationUrl: (redirect) =>
      authorizationUrl(endpoints.authorize, clientId, scopes, redirect),
    exchangeAuthorizationCode: (grant) =>
      call("exchange_authorization_code", async () =>
        await processTokenResponse(
          await postForm(endpoints.token, {
            grant_type: "authorization_code",
            code: grant.code,
            code_verifier: grant.codeVerifier,
            redirect_uri: grant.redirectUri,
            client_id: clientId,
          }),
          quirks,
        )),
    startDeviceAuthorization: () =>
      call("start_device_authorization", async () =>
        await processDeviceAuthorizationResponse(
          await postForm(endpoints.deviceAuthorization, { client_id: clientId, scope: scopes }),
        )),
    pollDeviceToken: (deviceCode) =>
      call("poll_device_token", async () =>
        await processDeviceTokenResponse(
          await postForm(endpoints.token, {
            grant_type: DEVICE_CODE_GRANT_TYPE,
            device_code: deviceCode,
            client_id: clientId,
          }),
          quirks,
        )),
    refreshTokens: (refreshToken) =>
      call("refresh_tokens", async () =>
        await processTokenResponse(
          await postForm(endpoints.token, {
            grant_type: "refresh_token",
            refresh_token: refreshToken,
            client_id: clientId,
          }),
          quirks,
        )),
    fetchUser: (accessToken) =>
      call("fetch_user", async () =>
        await processUser(
          await send(endpoints.user, {
            method: "GET",
            headers: { Authorization: `Bearer ${accessToken}` },
          }),
        )),
    revokeToken: (token) =>
      call("revoke_token", async () =>
        await processRevocationResponse(
          await postForm(endpoints.revoke, { token, client_id: clientId }),
        )),
  };
}
