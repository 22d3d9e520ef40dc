/**
 * The GitLab implementation of `Upstream`: GitLab's endpoints below the instance's URL (which
 * may carry a sub-path), its user API, and what it sends with each grant. The OAuth exchanges
 * themselves (RFC 8628, RFC 6749 §4.1 with RFC 7636, §6, RFC 7009) are the provider-neutral
 * client's (oauth_http.ts); GitLab needs none of its quirks.
 *
 * @see https://docs.gitlab.com/api/oauth2/#device-authorization-grant-flow
 */

import type { GitLabEndpoint } from "../metrics/catalog.ts";
import {
  authorizationUrl,
  createOAuthHttpClient,
  DEVICE_CODE_GRANT_TYPE,
  endpointBelow,
  httpFailure,
  malformed,
  type MisconfigurationHints,
  type OAuthHttpOptions,
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
  type AuthorizationCodeGrant,
  type AuthorizationRedirect,
  type Upstream,
  UpstreamError,
  type UpstreamProfile,
  type UpstreamUser,
} from "./types.ts";
import { isWebUrl } from "../http/web_url.ts";

export type { MisconfigurationHints, UpstreamLogger } from "./oauth_http.ts";

/** How GitLab presents itself on pages, in metadata and in messages. */
export const GITLAB_DISPLAY_NAME = "GitLab";

/** How to reach one GitLab instance as one OAuth application. */
export interface GitLabUpstreamOptions {
  /** Base URL of the instance; may carry a sub-path (`https://host/gitlab`). */
  gitlabUrl: URL;
  /** The OAuth application id. */
  clientId: string;
  /**
   * The application's secret, for a confidential application: sent with the authorization code
   * grant only. Never logged.
   */
  clientSecret?: string;
  /** Space-separated GitLab scopes requested at the start of each device flow. */
  scopes: string;
  /** Time limit of each request, response body included, in milliseconds. */
  timeoutMs: number;
  /** Replaces the global `fetch` (tests, proxies). */
  fetch?: typeof fetch;
  /** Receives a line for every transient failure; never given tokens or codes. */
  logger?: UpstreamLogger;
  /** The settings to name when GitLab refuses the application (`GITLAB_CLIENT_ID`, ...). */
  hints?: MisconfigurationHints;
  /**
   * Told each call's endpoint (`device_authorization`, `token`, `user`, `revoke`,
   * `membership`) and status, or `timeout` or `network` when none came (metrics).
   */
  observeCall?: (endpoint: GitLabEndpoint, result: number | "timeout" | "network") => void;
}

/** Creates the GitLab upstream client; throws TypeError/RangeError on unusable options. */
export function createGitLabUpstream(options: GitLabUpstreamOptions): Upstream {
  const { clientId, scopes } = options;
  if (!isWebUrl(options.gitlabUrl)) throw new TypeError("gitlabUrl must be an http: or https: URL");
  if (clientId === "") throw new TypeError("clientId must not be empty");
  const endpoints = {
    authorizeDevice: endpointBelow(options.gitlabUrl, "oauth/authorize_device"),
    authorize: endpointBelow(options.gitlabUrl, "oauth/authorize"),
    token: endpointBelow(options.gitlabUrl, "oauth/token"),
    user: endpointBelow(options.gitlabUrl, "api/v4/user"),
    revoke: endpointBelow(options.gitlabUrl, "oauth/revoke"),
  };
  const { send, postForm, call } = createOAuthHttpClient({
    ...options,
    onResponse: options.observeCall &&
      observeByEndpoint(options.gitlabUrl, endpoints, options.observeCall),
  });

  return {
    profile: gitLabProfile(options.gitlabUrl, scopes),
    authorizationUrl: (redirect: AuthorizationRedirect) =>
      authorizationUrl(endpoints.authorize, clientId, scopes, redirect),

    exchangeAuthorizationCode: (grant: AuthorizationCodeGrant) =>
      call("exchange_authorization_code", async () => {
        const response = await postForm(endpoints.token, {
          grant_type: "authorization_code",
          code: grant.code,
          code_verifier: grant.codeVerifier,
          redirect_uri: grant.redirectUri,
          client_id: clientId,
          ...(options.clientSecret ? { client_secret: options.clientSecret } : {}),
        });
        return await processTokenResponse(response);
      }),

    startDeviceAuthorization: () =>
      call("start_device_authorization", async () => {
        const response = await postForm(endpoints.authorizeDevice, {
          client_id: clientId,
          scope: scopes,
        });
        return await processDeviceAuthorizationResponse(response);
      }),

    pollDeviceToken: (deviceCode: string) =>
      call("poll_device_token", async () => {
        const response = await postForm(endpoints.token, {
          grant_type: DEVICE_CODE_GRANT_TYPE,
          device_code: deviceCode,
          client_id: clientId,
        });
        return await processDeviceTokenResponse(response);
      }),

    refreshTokens: (refreshToken: string) =>
      call("refresh_tokens", async () => {
        const response = await postForm(endpoints.token, {
          grant_type: "refresh_token",
          refresh_token: refreshToken,
          client_id: clientId,
        });
        return await processTokenResponse(response);
      }),

    fetchUser: (accessToken: string) =>
      call("fetch_user", async () => {
        const response = await send(endpoints.user, {
          method: "GET",
          headers: { Authorization: `Bearer ${accessToken}` },
        });
        return await processGitLabUserResponse(response);
      }),

    revokeToken: (token: string) =>
      call("revoke_token", async () => {
        const response = await postForm(endpoints.revoke, { token, client_id: clientId });
        return await processRevocationResponse(response);
      }),

    membership: (accessToken: string, groupPath: string, userId: number) =>
      call("membership", async () => {
        const response = await send(membershipEndpoint(options.gitlabUrl, groupPath, userId), {
          method: "GET",
          headers: { Authorization: `Bearer ${accessToken}` },
        });
        return await processGitLabMemberResponse(response);
      }),
  };
}

/** The metric names of the endpoints the service calls at one URL each. */
const ENDPOINT_NAMES = {
  authorizeDevice: "device_authorization",
  token: "token",
  user: "user",
  revoke: "revoke",
} as const satisfies Record<string, GitLabEndpoint>;

/**
 * An observer of calls by URL, telling `observe` the endpoint's name instead; a group member
 * lookup (one URL per group and user) is `membership`.
 */
function observeByEndpoint(
  gitlabUrl: URL,
  endpoints: Record<keyof typeof ENDPOINT_NAMES, URL>,
  observe: NonNullable<GitLabUpstreamOptions["observeCall"]>,
): NonNullable<OAuthHttpOptions["onResponse"]> {
  const names = new Map<string, GitLabEndpoint>();
  for (const [key, name] of Object.entries(ENDPOINT_NAMES)) {
    names.set(endpoints[key as keyof typeof ENDPOINT_NAMES].href, name);
  }
  const groups = endpointBelow(gitlabUrl, "api/v4/groups/").href;
  const named = (url: URL): GitLabEndpoint =>
    names.get(url.href) ??
      (url.href.startsWith(groups) && url.pathname.includes("/members/all/")
        ? "membership"
        : "other");
  return (url, result) => observe(named(url), result);
}

/** How a GitLab instance at `url` presents itself, asked for `scopes`. */
export function gitLabProfile(url: URL, scopes: string): UpstreamProfile {
  return { displayName: GITLAB_DISPLAY_NAME, url, scopes };
}

/**
 * `GET /api/v4/groups/{full path}/members/all/{user id}`: members/all includes members through
 * parent groups (and invited groups), which is what "directly or through a parent group" means.
 *
 * @see https://docs.gitlab.com/api/members/#get-a-member-of-a-group-or-project-including-inherited-and-invited-members
 */
export function membershipEndpoint(gitlabUrl: URL, groupPath: string, userId: number): URL {
  const group = encodeURIComponent(groupPath);
  return endpointBelow(gitlabUrl, `api/v4/groups/${group}/members/all/${userId}`);
}

/**
 * A member answer's `access_level`; null for 404 (not a member, or a group the user cannot
 * see) and for a membership that is not active (awaiting approval, or the seat is blocked).
 */
export async function processGitLabMemberResponse(response: Response): Promise<number | null> {
  const body = await readBody(response);
  if (response.status === 404) return null;
  if (response.status === 401 || response.status === 403) {
    throw new UpstreamError("terminal", "invalid_token", "invalid_token", response.status);
  }
  if (response.status !== 200) throw httpFailure(response.status);
  const json = parseJsonObject(body, "member");
  const level = json.access_level;
  if (typeof level !== "number" || !Number.isSafeInteger(level)) throw malformed("member");
  // `state` is the user's account; `membership_state` the membership's ("awaiting" while a
  // user cap or seat approval holds it back).
  if (json.state !== undefined && json.state !== "active") return null;
  if (json.membership_state !== undefined && json.membership_state !== "active") return null;
  return level;
}

/** Validates a `GET /api/v4/user` response and consumes its body. */
export async function processGitLabUserResponse(response: Response): Promise<UpstreamUser> {
  const body = await readBody(response);
  if (response.status === 401 || response.status === 403) {
    throw new UpstreamError("terminal", "invalid_token", "invalid_token", response.status);
  }
  if (response.status !== 200) throw httpFailure(response.status);
  const json = parseJsonObject(body, "user");
  if (typeof json.id !== "number" || !Number.isSafeInteger(json.id)) throw malformed("user");
  return { id: json.id, username: requireNonEmptyString(json.username, "user") };
}
