/**
 * The upstream identity provider, as the routes see it. Nothing above this folder knows which
 * provider it talks to: records, the store and sessions say `upstream*`, and pages, metadata,
 * consent, the guard's messages and log lines name the provider by `profile.displayName`.
 *
 * `oauth_http.ts` is the provider-neutral half (sending with a time limit, transport errors,
 * RFC 6749 / RFC 8628 answers classified into `UpstreamError` and `DevicePollResult`, backoff
 * headers, the operator's hints on a refused application); `oauth_provider.ts` turns a
 * provider's description (endpoints, user API, quirks, scopes in words, memberships and their
 * roles) into an `Upstream`; `gitlab.ts` is GitLab's description. Adding a provider takes a description in a
 * module of this folder and one line in `providers.ts`; UPSTREAM_PROVIDER chooses it.
 * What still says GitLab, on purpose: the `gitlab_user` claim (fixed by the spec), the
 * variables' names (`GITLAB_*`, kept for compatibility), and the library's `gitlab` options
 * and `gitlabToken` field (its public API).
 *
 * @see RFC 8628 (device authorization grant)
 */

/** A device authorization started at the upstream provider (RFC 8628 §3.2). */
export interface DeviceAuthorization {
  /** `device_code`: what polls present; never shown to the user. */
  deviceCode: string;
  /** `user_code`: what the user enters at the provider. */
  userCode: string;
  /** `verification_uri`: where the user enters it. */
  verificationUri: string;
  /** `verification_uri_complete`: the same with the code filled in, when the provider sent it. */
  verificationUriComplete?: string;
  /** Lifetime of the device code, in seconds. */
  expiresInSeconds: number;
  /** Minimum polling interval the provider asked for, in seconds. */
  intervalSeconds: number;
}

/** Tokens the upstream provider issued. */
export interface UpstreamTokens {
  /** The provider's access token. */
  accessToken: string;
  /** Empty string when the provider issued none. */
  refreshToken: string;
  /** Lifetime of the access token in seconds, when the provider said. */
  expiresInSeconds?: number;
}

/** The upstream user, as far as we need them. */
export interface UpstreamUser {
  /**
   * The provider's user id, as text: GitLab's and GitHub's are numbers, others' are UUIDs or
   * names; nothing above this folder reads it as a number.
   */
  id: string;
  /** The provider's username. */
  username: string;
}

/**
 * Outcome of one device-token poll (RFC 8628 §3.5), decided from the provider's `error` code,
 * never from message text.
 */
export type DevicePollResult =
  & (
    | { kind: "token"; tokens: UpstreamTokens }
    /** `authorization_pending`: the user has not approved yet. */
    | { kind: "pending" }
    /** `slow_down`: still pending, and the provider wants a longer interval. */
    | { kind: "slow_down" }
    /** HTTP 429: the provider refuses calls for a while; the flow itself is unchanged. */
    | { kind: "rate_limited" }
  )
  & {
    /**
     * Set when the provider asks for a pause of all calls: on HTTP 429, or on any answer that
     * says `RateLimit-Remaining: 0`.
     */
    backoff?: UpstreamBackoff;
  };

/**
 * How long the provider wants to be left alone, from its `Retry-After` (seconds or an HTTP
 * date) or `RateLimit-Reset` (GitLab: a Unix time) headers. Both empty: it did not say.
 *
 * @see RFC 9110 §10.2.3, https://docs.gitlab.com/security/rate_limits/
 */
export interface UpstreamBackoff {
  /** From `Retry-After: <seconds>`. */
  retryAfterSeconds?: number;
  /** Epoch seconds, from `Retry-After: <HTTP date>` or `RateLimit-Reset`. */
  resumeAtEpochSeconds?: number;
}

/**
 * Why an upstream call failed. `terminal` means the flow or grant can never succeed
 * (`access_denied`, `expired_token`, `invalid_*`); `transient` means trying again later may work
 * (timeouts, network errors, 5xx, 429, malformed answers).
 */
export type UpstreamFailure = "terminal" | "transient";

/** An upstream call failed; raised only at the upstream boundary. */
export class UpstreamError extends Error {
  /** A failure of kind `failure`, with the provider's or our `code`. */
  constructor(
    readonly failure: UpstreamFailure,
    /** The provider's OAuth `error` code, or a short code of ours (`timeout`, `network`, `http_502`, `malformed`). */
    readonly code: string,
    message?: string,
    /** The provider's HTTP status, when it answered (never with a body of its own). */
    readonly status?: number,
  ) {
    super(message ?? code);
    this.name = "UpstreamError";
  }
}

/**
 * Where the browser is sent to sign in with the authorization code grant (RFC 6749 §4.1.1), and
 * what comes back with the user: our callback, a fresh `state`, PKCE S256 (RFC 7636).
 */
export interface AuthorizationRedirect {
  /** `{base}/oauth/callback`, registered with the provider. */
  redirectUri: string;
  /** A fresh random value the callback must bring back (CSRF). */
  state: string;
  /** BASE64URL(SHA256(verifier)). */
  codeChallenge: string;
  /** Space-separated scopes to ask for instead of the profile's (a server's `gitlab_scopes`). */
  scopes?: string;
}

/** A code the provider returned to our callback, and what its exchange must repeat. */
export interface AuthorizationCodeGrant {
  /** The provider's authorization code. */
  code: string;
  /** The PKCE verifier whose challenge went out with the redirect. */
  codeVerifier: string;
  /** The redirect URI the authorization request carried. */
  redirectUri: string;
}

/**
 * How the provider presents itself: pages, metadata, consent and the guard's messages read
 * this, never a provider's name of their own.
 */
export interface UpstreamProfile {
  /** The provider's name as people know it, e.g. `GitLab`. */
  displayName: string;
  /** Where users sign in (the provider's origin, with any sub-path), e.g. `https://gitlab.com`. */
  url: URL;
  /** Space-separated provider scopes every sign-in asks for. */
  scopes: string;
  /** The provider's scopes in words, for the pages (a scope not here is shown by its name). */
  scopeWords?: Readonly<Record<string, string>>;
}

/**
 * A provider's roles in a group, as it declares them: what ALLOWED_GITLAB_GROUPS, the policy
 * files and the servers file may name after a group (`acme:developer`), and the levels its
 * membership lookup answers. Nothing outside the provider's module names a role.
 */
export interface ProviderRoles {
  /**
   * Each role's name (lower case) and its level, lowest first: a role is met by its own level
   * and every higher one.
   */
  levels: Readonly<Record<string, number>>;
  /**
   * The role a group named without one asks for (GitLab: `guest`, so that Minimal Access counts
   * only where a rule names it); absent: any membership.
   */
  unnamed?: string;
}

/** What the service needs of the upstream identity provider. */
export interface Upstream {
  /** How the provider presents itself. */
  readonly profile: UpstreamProfile;
  /** The provider's authorization URL for a redirect sign-in (no request is made). */
  authorizationUrl(redirect: AuthorizationRedirect): URL;
  /** Exchanges a code from our callback for tokens (RFC 6749 §4.1.3). Throws UpstreamError. */
  exchangeAuthorizationCode(grant: AuthorizationCodeGrant): Promise<UpstreamTokens>;
  /** Starts a device flow asking for `scopes` (default: the profile's). Throws UpstreamError. */
  startDeviceAuthorization(scopes?: string): Promise<DeviceAuthorization>;
  /** Polls the token endpoint once with the device code. Throws UpstreamError. */
  pollDeviceToken(deviceCode: string): Promise<DevicePollResult>;
  /** Exchanges an upstream refresh token for new tokens. Throws UpstreamError. */
  refreshTokens(refreshToken: string): Promise<UpstreamTokens>;
  /** Reads the user the access token belongs to. Throws UpstreamError. */
  fetchUser(accessToken: string): Promise<UpstreamUser>;
  /** Revokes an upstream token (and its pair), RFC 7009. Throws UpstreamError. */
  revokeToken(token: string): Promise<void>;
  /**
   * Optional (GitLab has it): the access level of user `userId` in the group `groupPath` (its
   * full path), directly or through a parent group, read with the user's own token; null when
   * not a member. Group lists (ALLOWED_GITLAB_GROUPS) need it. Throws UpstreamError.
   */
  membership?(accessToken: string, groupPath: string, userId: string): Promise<number | null>;
}
