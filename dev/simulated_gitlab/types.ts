/** The public types of the simulated GitLab: its options, its test controls and what they report. */

import type { FakeGitLabIdTokens } from "./id_tokens.ts";
import type { Clock } from "../../src/clock.ts";

/** An endpoint `failNext` can make fail; `token` is the device-code grant, `refresh` the other. */
export type SimulatedEndpoint = "authorize_device" | "token" | "refresh" | "user" | "members";

/**
 * How the next request to an endpoint fails: an HTTP 500 or 429, a 200 whose body is not JSON,
 * a 200 whose body never comes so the client times out (`timeout`), a token response without
 * `refresh_token` (`token`/`refresh` only), or an RFC 8628 `slow_down` (`token` only).
 */
export type SimulatedFailure =
  | "500"
  | "429"
  | "malformed"
  | "timeout"
  | "no_refresh_token"
  | "slow_down";

/** A GitLab account known to the simulation. */
export interface SimulatedUser {
  id: number;
  username: string;
  name: string;
}

/** A token pair the simulation issued. */
export interface SimulatedTokens {
  accessToken: string;
  refreshToken: string;
  /** Lifetime of the access token, in seconds. */
  expiresIn: number;
}

/** How many requests each endpoint has received, failed ones included. */
export interface SimulatedGitLabCalls {
  /** `POST /oauth/authorize_device` */
  authorizeDevice: number;
  /** `POST /oauth/token` with the device-code grant. */
  deviceToken: number;
  /** `POST /oauth/token` with the refresh-token grant. */
  refresh: number;
  /** `GET /api/v4/user` */
  user: number;
  /** `GET /api/v4/projects` */
  projects: number;
  /** `POST /oauth/revoke` */
  revoke: number;
  /** `GET` or `POST /oauth/device` (the verification page). */
  devicePage: number;
  /** `GET` or `POST /oauth/authorize` (the authorization page of the redirect sign-in). */
  authorizePage: number;
  /** `POST /oauth/token` with the authorization code grant. */
  authorizationCode: number;
}

/** Options of `startSimulatedGitLab`. */
export interface SimulatedGitLabOptions {
  /** 0 (the default) picks a free port. */
  port?: number;
  /** Defaults to 127.0.0.1. */
  hostname?: string;
  /** Lifetime of issued access tokens; defaults to 7200 like GitLab. */
  accessTokenTtlSeconds?: number;
  /** Lifetime of device codes; defaults to 300. */
  deviceExpiresInSeconds?: number;
  /** Polling interval announced by the device authorization endpoint; defaults to 5. */
  interval?: number;
  /** When set, only this OAuth application id is accepted; otherwise any non-empty one. */
  clientId?: string;
  /** When set, the authorization code grant requires this `client_secret` (confidential app). */
  clientSecret?: string;
  /** Accounts; the first one approves on the verification page. Defaults to ada (4242). */
  users?: SimulatedUser[];
  /** What device-code and token expiry is measured against; defaults to the wall clock. */
  clock?: Clock;
  /** Groups by full path (`acme`, `acme/platform`); a subgroup's parent need not be listed. */
  groups?: string[];
  /** Direct memberships; members of a group are members of its subgroups too. */
  memberships?: SimulatedMembership[];
}

/** A user's direct membership of a group, with GitLab's `access_level` (10 guest … 50 owner). */
export interface SimulatedMembership {
  group: string;
  userId: number;
  accessLevel: number;
}

/** The test controls over the simulation's state, without the server around it. */
export interface SimulatedGitLabControls {
  /** Requests received per endpoint. */
  readonly calls: SimulatedGitLabCalls;
  /** Known accounts (mutable); `users[0]` is the default. */
  readonly users: SimulatedUser[];
  /** Every token revoked through `POST /oauth/revoke` or `revoke()`. */
  readonly revokedTokens: Set<string>;
  /** Approves a pending user code as `userId` (default: the first user); throws if it cannot. */
  approve(userCode: string, userId?: number): void;
  /** Denies a pending user code; throws if it cannot. */
  deny(userCode: string): void;
  /** Makes a user code's device code expired at once; throws if the code is unknown. */
  expireDevice(userCode: string): void;
  /** The user code of the most recent device authorization, if any. */
  lastUserCode(): string | undefined;
  /**
   * GitLab's rate limit: every device-token poll in the next `seconds` answers HTTP 429 with
   * `Retry-After` (the seconds left), counted in `calls.deviceToken` like any other.
   */
  rateLimit(seconds: number): void;
  /** Queues a failure for the next request to `endpoint` (first queued, first used). */
  failNext(endpoint: SimulatedEndpoint, mode: SimulatedFailure): void;
  /**
   * Issues a token pair directly, as if `userId` (default: the first user) had signed in; any
   * accepted client id may refresh it.
   */
  issueTokens(userId?: number): SimulatedTokens;
  /** Revokes an access or refresh token (and its pair), as `POST /oauth/revoke` does. */
  revoke(token: string): void;
  /**
   * Every `GET /api/v4/groups/:id/members/all/:user_id`, failed ones included: the group as
   * asked (decoded) and the user id.
   */
  readonly memberLookups: { group: string; userId: number }[];
  /** Creates a group (full path) if it does not exist yet. */
  addGroup(path: string): void;
  /** Sets `userId`'s direct membership of `group` (created if needed); null removes it. */
  setMembership(group: string, userId: number, accessLevel: number | null): void;
  /**
   * `userId`'s access level in `group` as `members/all` reports it: the highest of its direct
   * memberships of the group and of every ancestor; null when none, undefined when no such group.
   */
  memberAccessLevel(group: string, userId: number): number | null | undefined;
}

/** A running simulated GitLab and its test controls. */
export interface SimulatedGitLab extends SimulatedGitLabControls {
  /** The origin it listens on, e.g. `http://127.0.0.1:40123`. */
  readonly url: URL;
  /** CI ID tokens: the RS256 key served at `/oauth/discovery/keys`, and tokens signed with it. */
  readonly idTokens: FakeGitLabIdTokens;
  /** Stops the server; requests left hanging by `timeout` are ended first. Idempotent. */
  close(): Promise<void>;
}
