/**
 * An OAuth provider described by data: where its endpoints are below its URL, how its user API
 * names the user, how it departs from the RFCs, and what it knows beyond OAuth (its scopes in
 * words, group memberships and their roles). The exchanges themselves are the provider-neutral client's
 * (oauth_http.ts). GitLab is one description (gitlab.ts); another RFC 8628 provider (GitHub,
 * Keycloak) is another description, and nothing above this folder changes.
 *
 * @see RFC 8628, RFC 6749 §4.1 with RFC 7636, §6, RFC 7009
 */

import { DEVICE_CODE_GRANT_TYPE } from "../http/grant_types.ts";
import {
  authorizationUrl,
  createOAuthHttpClient,
  endpointBelow,
  httpFailure,
  malformed,
  type MisconfigurationHints,
  type OAuthHttpClient,
  type OAuthHttpOptions,
  type OAuthQuirks,
  parseJsonObject,
  processDeviceAuthorizationResponse,
  processDeviceTokenResponse,
  processRevocationResponse,
  processTokenResponse,
  readBody,
  requireNonEmptyString,
  type UpstreamLogger,
} from "./oauth_http.ts";
import {
  type ProviderRoles,
  type Upstream,
  UpstreamError,
  type UpstreamProfile,
  type UpstreamUser,
} from "./types.ts";
import { isWebUrl } from "../http/web_url.ts";

/** The paths of a provider's endpoints, below its URL (which may carry a sub-path). */
export interface ProviderEndpoints {
  deviceAuthorization: string;
  authorize: string;
  token: string;
  user: string;
  revoke: string;
}

/**
 * The calls metrics tell apart: one per endpoint the service calls, `membership` for group
 * member lookups (one URL per group and user), `other` for anything else.
 */
export type ProviderCall =
  | "device_authorization"
  | "token"
  | "user"
  | "revoke"
  | "membership"
  | "other";

/** What makes one provider: its name, endpoints, user API, quirks and knowledge. */
export interface ProviderDescription {
  /** The provider's name as people know it, e.g. `GitLab`. */
  displayName: string;
  endpoints: ProviderEndpoints;
  /** Reads the user API's answer (consuming its body); throws UpstreamError. */
  processUser(response: Response): Promise<UpstreamUser>;
  quirks?: OAuthQuirks;
  /** The provider's scopes in words, for the pages (a scope not here is shown by its name). */
  scopeWords?: Readonly<Record<string, string>>;
  /**
   * Whether anyone may make an account on the instance at `url` (GitLab: gitlab.com), so that
   * admitting every account there admits anyone: strict refuses it without a list.
   */
  anyoneCanSignUp?(url: URL): boolean;
  /**
   * Group memberships, for providers that have them (GitLab): given the client that sends and
   * the provider's URL, the `Upstream.membership` lookup.
   */
  membership?(http: OAuthHttpClient, baseUrl: URL): NonNullable<Upstream["membership"]>;
  /**
   * The roles a group membership has, for providers with memberships (GitLab's Guest to
   * Owner): the only names a group entry's `:role` may take, and the levels they stand for.
   */
  roles?: ProviderRoles;
}

/** How to reach one instance of a provider as one OAuth application. */
export interface ProviderConnection {
  /** The instance's URL; may carry a sub-path (`https://host/gitlab`). */
  baseUrl: URL;
  /** The OAuth application id. */
  clientId: string;
  /**
   * The application's secret, for a confidential application: sent with the authorization code
   * grant only. Never logged.
   */
  clientSecret?: string;
  /** Space-separated scopes every sign-in asks for. */
  scopes: string;
  /** Time limit of each request, response body included, in milliseconds. */
  timeoutMs: number;
  /** Replaces the global `fetch` (tests, proxies). */
  fetch?: typeof fetch;
  /** Receives a line for every transient failure; never given tokens or codes. */
  logger?: UpstreamLogger;
  /** The settings to name when the provider refuses the application. */
  hints?: MisconfigurationHints;
  /**
   * Told each call's endpoint and status, or `timeout` or `network` when none came (metrics).
   */
  observeCall?: (endpoint: ProviderCall, result: number | "timeout" | "network") => void;
}

/** How a provider at `url`, asked for `scopes`, presents itself. */
export function providerProfile(
  description: ProviderDescription,
  url: URL,
  scopes: string,
): UpstreamProfile {
  return {
    displayName: description.displayName,
    url,
    scopes,
    ...(description.scopeWords ? { scopeWords: description.scopeWords } : {}),
  };
}

/** The `Upstream` of a described provider; throws TypeError/RangeError on unusable options. */
export function createOAuthProvider(
  description: ProviderDescription,
  connection: ProviderConnection,
): Upstream {
  const { clientId, scopes, baseUrl } = connection;
  const { quirks } = description;
  if (!isWebUrl(baseUrl)) throw new TypeError("the provider's URL must be http: or https:");
  if (clientId === "") throw new TypeError("clientId must not be empty");
  const at = (path: string) => endpointBelow(baseUrl, path);
  const endpoints: Record<keyof ProviderEndpoints, URL> = {
    deviceAuthorization: at(description.endpoints.deviceAuthorization),
    authorize: at(description.endpoints.authorize),
    token: at(description.endpoints.token),
    user: at(description.endpoints.user),
    revoke: at(description.endpoints.revoke),
  };
  const http = createOAuthHttpClient({
    ...connection,
    onResponse: connection.observeCall && observeByEndpoint(endpoints, connection.observeCall),
  });
  const { send, postForm, call } = http;
  const upstream: Upstream = {
    profile: providerProfile(description, baseUrl, scopes),
    authorizationUrl: (redirect) =>
      authorizationUrl(endpoints.authorize, clientId, redirect.scopes ?? scopes, redirect),
    exchangeAuthorizationCode: (grant) =>
      call("exchange_authorization_code", async () =>
        await processTokenResponse(
          await postForm(endpoints.token, {
            grant_type: "authorization_code",
            code: grant.code,
            code_verifier: grant.codeVerifier,
            redirect_uri: grant.redirectUri,
            client_id: clientId,
            ...(connection.clientSecret ? { client_secret: connection.clientSecret } : {}),
          }),
          quirks,
        )),
    startDeviceAuthorization: (asked = scopes) =>
      call("start_device_authorization", async () =>
        await processDeviceAuthorizationResponse(
          await postForm(endpoints.deviceAuthorization, { client_id: clientId, scope: asked }),
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
        await description.processUser(
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
  if (description.membership) {
    const { observeCall } = connection;
    const lookups = createOAuthHttpClient({
      ...connection,
      onResponse: observeCall && ((_url, result) => observeCall("membership", result)),
    });
    upstream.membership = description.membership(lookups, baseUrl);
  }
  return upstream;
}

/** The metric names of the endpoints the service calls. */
const ENDPOINT_NAMES: Partial<Record<keyof ProviderEndpoints, ProviderCall>> = {
  deviceAuthorization: "device_authorization",
  token: "token",
  user: "user",
  revoke: "revoke",
};

/** An observer of calls by URL, telling `observe` the endpoint's name instead. */
function observeByEndpoint(
  endpoints: Record<keyof ProviderEndpoints, URL>,
  observe: NonNullable<ProviderConnection["observeCall"]>,
): NonNullable<OAuthHttpOptions["onResponse"]> {
  const names = new Map<string, ProviderCall>();
  for (const [key, name] of Object.entries(ENDPOINT_NAMES)) {
    names.set(endpoints[key as keyof ProviderEndpoints].href, name);
  }
  return (url, result) => observe(names.get(url.href) ?? "other", result);
}

/**
 * The reader of a user API that answers a JSON object naming the user's id (a number or a
 * non-empty string; kept as text) and username in the members `fields` names (GitLab: `id`,
 * `username`; GitHub: `id`, `login`). 401 and 403 say the token is not accepted.
 */
export function userApiReader(
  fields: { id: string; username: string },
): (response: Response) => Promise<UpstreamUser> {
  return async (response) => {
    const body = await readBody(response);
    if (response.status === 401 || response.status === 403) {
      throw new UpstreamError("terminal", "invalid_token", "invalid_token", response.status);
    }
    if (response.status !== 200) throw httpFailure(response.status);
    const json = parseJsonObject(body, "user");
    return {
      id: userIdOf(json[fields.id]),
      username: usernameOf(json[fields.username]),
    };
  };
}

/** Longest user id taken: ids are numbers or UUIDs, never pages of text. */
const MAX_USER_ID_CHARS = 255;

/** Longest username taken (GitLab's limit): it is in every session and every access token. */
const MAX_USERNAME_CHARS = 255;

/** A username: non-empty, at most MAX_USERNAME_CHARS, no control characters. */
function usernameOf(value: unknown): string {
  const text = requireNonEmptyString(value, "user");
  if (text.length > MAX_USERNAME_CHARS || /\p{Cc}/u.test(text)) throw malformed("user");
  return text;
}

/** A user id as text: a safe integer, or a non-empty string of printable characters. */
function userIdOf(value: unknown): string {
  if (typeof value === "number" && Number.isSafeInteger(value)) return String(value);
  if (
    typeof value === "string" && value.length <= MAX_USER_ID_CHARS && /^[\x21-\x7e]+$/.test(value)
  ) {
    return value;
  }
  throw malformed("user");
}
