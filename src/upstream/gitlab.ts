/**
 * GitLab as a provider (`oauth_provider.ts` does the OAuth exchanges): its endpoints below the
 * instance's URL (which may carry a sub-path), its user API, its scopes in words, its group
 * memberships and their roles. GitLab needs none of the RFC quirks.
 *
 * @see https://docs.gitlab.com/api/oauth2/#device-authorization-grant-flow
 */

import { endpointBelow, httpFailure, malformed, parseJsonObject, readBody } from "./oauth_http.ts";
import {
  createOAuthProvider,
  type ProviderConnection,
  type ProviderDescription,
  providerProfile,
  userApiReader,
} from "./oauth_provider.ts";
import { GITLAB_SCOPE_WORDS } from "./gitlab_scopes.ts";
import {
  type ProviderRoles,
  type Upstream,
  UpstreamError,
  type UpstreamProfile,
  type UpstreamUser,
} from "./types.ts";

export type { MisconfigurationHints, UpstreamLogger } from "./oauth_http.ts";

/** How GitLab presents itself on pages, in metadata and in messages. */
export const GITLAB_DISPLAY_NAME = "GitLab";

/** How to reach one GitLab instance as one OAuth application. */
export type GitLabUpstreamOptions = Omit<ProviderConnection, "baseUrl"> & {
  /** Base URL of the instance; may carry a sub-path (`https://host/gitlab`). */
  gitlabUrl: URL;
};

/** Validates a `GET /api/v4/user` response and consumes its body. */
export const processGitLabUserResponse: (response: Response) => Promise<UpstreamUser> =
  userApiReader({ id: "id", username: "username" });

/**
 * GitLab's roles and their `access_level` values. Minimal Access (5) is no membership unless a
 * rule names it: it sees nothing of the group's projects.
 *
 * @see https://docs.gitlab.com/api/members/#roles
 */
export const GITLAB_ROLES = {
  minimal_access: 5,
  guest: 10,
  planner: 15,
  reporter: 20,
  developer: 30,
  maintainer: 40,
  owner: 50,
} as const;

/** GitLab's roles as the provider declares them: a group named without a role asks for Guest. */
export const GITLAB_PROVIDER_ROLES: ProviderRoles = { levels: GITLAB_ROLES, unnamed: "guest" };

/** GitLab as a provider: its endpoints, user API, scopes in words, memberships and roles. */
export const GITLAB_PROVIDER: ProviderDescription = {
  displayName: GITLAB_DISPLAY_NAME,
  endpoints: {
    deviceAuthorization: "oauth/authorize_device",
    authorize: "oauth/authorize",
    token: "oauth/token",
    user: "api/v4/user",
    revoke: "oauth/revoke",
  },
  processUser: processGitLabUserResponse,
  scopeWords: GITLAB_SCOPE_WORDS,
  anyoneCanSignUp: (url) => ["gitlab.com", "www.gitlab.com"].includes(url.hostname.toLowerCase()),
  membership: ({ send, call }, gitlabUrl) => (accessToken, groupPath, userId) =>
    call("membership", async () => {
      const response = await send(membershipEndpoint(gitlabUrl, groupPath, userId), {
        method: "GET",
        headers: { Authorization: `Bearer ${accessToken}` },
      });
      return await processGitLabMemberResponse(response);
    }),
  roles: GITLAB_PROVIDER_ROLES,
};

/** Creates the GitLab upstream client; throws TypeError/RangeError on unusable options. */
export function createGitLabUpstream(options: GitLabUpstreamOptions): Upstream {
  return createOAuthProvider(GITLAB_PROVIDER, { ...options, baseUrl: options.gitlabUrl });
}

/** How a GitLab instance at `url` presents itself, asked for `scopes`. */
export function gitLabProfile(url: URL, scopes: string): UpstreamProfile {
  return providerProfile(GITLAB_PROVIDER, url, scopes);
}

/**
 * `GET /api/v4/groups/{full path}/members/all/{user id}`: members/all includes members through
 * parent groups (and invited groups), which is what "directly or through a parent group" means.
 *
 * @see https://docs.gitlab.com/api/members/#get-a-member-of-a-group-or-project-including-inherited-and-invited-members
 */
export function membershipEndpoint(gitlabUrl: URL, groupPath: string, userId: string): URL {
  const group = encodeURIComponent(groupPath);
  const user = encodeURIComponent(userId);
  return endpointBelow(gitlabUrl, `api/v4/groups/${group}/members/all/${user}`);
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
