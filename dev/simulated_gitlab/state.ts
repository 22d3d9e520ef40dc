/**
 * The simulated GitLab's in-memory model: accounts, device codes, tokens and their expiry, the
 * queued failures and the counters tests inspect. Knows nothing of HTTP; time comes from the
 * injected clock, so a test can move past a lifetime without sleeping.
 */

import { type Clock, systemClock } from "../../src/clock.ts";
import { type AuthorizationCodes, createAuthorizationCodes } from "./authorization_codes.ts";
import type {
  SimulatedEndpoint,
  SimulatedFailure,
  SimulatedGitLabCalls,
  SimulatedGitLabControls,
  SimulatedMembership,
  SimulatedUser,
} from "./types.ts";

/** Where a device authorization stands. */
export type DeviceStatus = "pending" | "approved" | "denied" | "consumed";

/** A device authorization: its two codes, who asked, and whether someone answered. */
export interface DeviceRecord {
  deviceCode: string;
  userCode: string;
  clientId: string;
  scope: string;
  /** Milliseconds since the epoch, on the state's clock. */
  expiresAt: number;
  status: DeviceStatus;
  userId?: number;
}

/** An issued access token and the refresh token that came with it. */
export interface TokenRecord {
  accessToken: string;
  /** Empty when none was issued. */
  refreshToken: string;
  userId: number;
  clientId: string;
  scope: string;
  /** Milliseconds since the epoch, on the state's clock. */
  createdAt: number;
  expiresAt: number;
  revoked: boolean;
}

/** What answering a user code on the verification page (or through a control) came to. */
export type Decision = "approved" | "denied" | "unknown" | "expired" | "used";

/** What the state needs to know from `startSimulatedGitLab`'s options. */
export interface SimulatedGitLabStateOptions {
  /** Lifetime of issued access tokens; defaults to 7200 like GitLab. */
  accessTokenTtlSeconds?: number;
  /** Lifetime of device codes; defaults to 300. */
  deviceExpiresInSeconds?: number;
  /** When set, only this OAuth application id is accepted; otherwise any non-empty one. */
  clientId?: string;
  /** When set, the authorization code grant requires this `client_secret` (confidential app). */
  clientSecret?: string;
  /** Accounts, copied; defaults to ada (4242). */
  users?: SimulatedUser[];
  /** Defaults to the wall clock. */
  clock?: Clock;
  /** Groups by full path. */
  groups?: string[];
  /** Direct memberships (their groups are created). */
  memberships?: SimulatedMembership[];
}

/** The model the HTTP handlers read and change, plus the test controls over it. */
export interface SimulatedGitLabState extends SimulatedGitLabControls {
  /** Lifetime of issued access tokens, in seconds. */
  readonly accessTokenTtlSeconds: number;
  /** Lifetime of device codes, in seconds. */
  readonly deviceExpiresInSeconds: number;
  /** The account that answers on the verification page. */
  defaultUser(): SimulatedUser;
  /** The account with this id, if it is (still) known. */
  userById(userId: number): SimulatedUser | undefined;
  /** Whether an OAuth application id is accepted. */
  isKnownClient(clientId: string): boolean;
  /** Whether the authorization code grant's `client_secret` is right (none configured: any). */
  isClientSecret(secret: string | undefined): boolean;
  /** The authorization codes of the redirect sign-in. */
  readonly codes: AuthorizationCodes;
  /** Issues a token pair for `userId` and `clientId`. */
  grantTokens(userId: number, clientId: string, scope: string): TokenRecord;
  /** Records a new pending device authorization for `clientId`. */
  startDevice(clientId: string, scope: string | undefined): DeviceRecord;
  /** The device authorization a device code belongs to, if any. */
  deviceByCode(deviceCode: string): DeviceRecord | undefined;
  /** Whether a device code's lifetime is over. */
  isExpired(device: DeviceRecord): boolean;
  /** Approves or denies a pending user code, saying why not when it cannot. */
  decide(userCode: string, approve: boolean, userId: number): Decision;
  /** Marks an approved device code used and issues its tokens. */
  consumeDevice(device: DeviceRecord, withRefresh: boolean): TokenRecord;
  /** The live token pair a refresh token belongs to, if any. */
  tokensByRefreshToken(refreshToken: string): TokenRecord | undefined;
  /** Revokes a pair and issues its successor for `clientId`, as GitLab's rotation does. */
  rotate(old: TokenRecord, clientId: string, withRefresh: boolean): TokenRecord;
  /** The pair of an access token that is neither revoked nor expired, if any. */
  liveAccessToken(accessToken: string): TokenRecord | undefined;
  /** Takes the next queued failure of `endpoint`, if any. */
  takeFailure(endpoint: SimulatedEndpoint): SimulatedFailure | undefined;
  /** Whole seconds left of the rate limit `rateLimit` set; 0 when none is on. */
  rateLimitSecondsLeft(): number;
}

const DEFAULT_USER: SimulatedUser = { id: 4242, username: "ada", name: "Ada Lovelace" };
const DEFAULT_SCOPE = "read_user";
const USER_CODE_LETTERS = "BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_DIGITS = "0123456789";

const FAILURES_BY_ENDPOINT: Record<SimulatedEndpoint, readonly SimulatedFailure[]> = {
  authorize_device: ["500", "429", "malformed", "timeout"],
  token: ["500", "429", "malformed", "timeout", "no_refresh_token", "slow_down"],
  refresh: ["500", "429", "malformed", "timeout", "no_refresh_token"],
  user: ["500", "429", "malformed", "timeout"],
  members: ["500", "429", "malformed", "timeout"],
};

/** Creates an empty model: no device codes, no tokens, no calls yet. */
export function createSimulatedGitLabState(
  options: SimulatedGitLabStateOptions = {},
): SimulatedGitLabState {
  const clock = options.clock ?? systemClock;
  const accessTokenTtlSeconds = options.accessTokenTtlSeconds ?? 7200;
  const deviceExpiresInSeconds = options.deviceExpiresInSeconds ?? 300;
  const users: SimulatedUser[] = (options.users ?? [DEFAULT_USER]).map((user) => ({ ...user }));
  if (users.length === 0) throw new TypeError("users must not be empty");

  const calls: SimulatedGitLabCalls = {
    authorizeDevice: 0,
    deviceToken: 0,
    refresh: 0,
    user: 0,
    projects: 0,
    revoke: 0,
    devicePage: 0,
    authorizePage: 0,
    authorizationCode: 0,
  };
  const revokedTokens = new Set<string>();
  const devicesByCode = new Map<string, DeviceRecord>();
  const devicesByUserCode = new Map<string, DeviceRecord>();
  const tokensByAccess = new Map<string, TokenRecord>();
  const tokensByRefresh = new Map<string, TokenRecord>();
  const failures: Record<SimulatedEndpoint, SimulatedFailure[]> = {
    authorize_device: [],
    token: [],
    refresh: [],
    user: [],
    members: [],
  };
  const groups = createGroups(options.groups ?? [], options.memberships ?? []);
  let latestUserCode: string | undefined;
  let rateLimitedUntil = 0;

  function findUser(userId: number): SimulatedUser {
    const user = users.find((candidate) => candidate.id === userId);
    if (user === undefined) throw new Error(`simulated GitLab: no user with id ${userId}`);
    return user;
  }

  function findDevice(userCode: string): DeviceRecord | undefined {
    return devicesByUserCode.get(normalizeUserCode(userCode));
  }

  function isExpired(device: DeviceRecord): boolean {
    return clock.now() >= device.expiresAt;
  }

  function unusedUserCode(): string {
    let userCode: string;
    do userCode = newUserCode(); while (devicesByUserCode.has(normalizeUserCode(userCode)));
    return userCode;
  }

  function issue(userId: number, clientId: string, scope: string, withRefresh = true): TokenRecord {
    const now = clock.now();
    const record: TokenRecord = {
      accessToken: randomHex(32),
      refreshToken: withRefresh ? randomHex(32) : "",
      userId,
      clientId,
      scope,
      createdAt: now,
      expiresAt: now + accessTokenTtlSeconds * 1000,
      revoked: false,
    };
    tokensByAccess.set(record.accessToken, record);
    if (record.refreshToken !== "") tokensByRefresh.set(record.refreshToken, record);
    return record;
  }

  function revokeRecord(record: TokenRecord): void {
    record.revoked = true;
    tokensByAccess.delete(record.accessToken);
    tokensByRefresh.delete(record.refreshToken);
  }

  function revokeToken(value: string): void {
    revokedTokens.add(value);
    const record = tokensByAccess.get(value) ?? tokensByRefresh.get(value);
    if (record !== undefined) revokeRecord(record);
  }

  function decide(userCode: string, approve: boolean, userId: number): Decision {
    const device = findDevice(userCode);
    if (device === undefined) return "unknown";
    if (device.status !== "pending") return "used";
    if (isExpired(device)) return "expired";
    if (approve) {
      findUser(userId);
      device.status = "approved";
      device.userId = userId;
      return "approved";
    }
    device.status = "denied";
    return "denied";
  }

  return {
    calls,
    users,
    revokedTokens,
    accessTokenTtlSeconds,
    deviceExpiresInSeconds,
    defaultUser: () => users[0],
    userById: (userId) => users.find((candidate) => candidate.id === userId),
    isClientSecret(secret) {
      return options.clientSecret === undefined || secret === options.clientSecret;
    },
    codes: createAuthorizationCodes(clock),
    grantTokens: (userId, clientId, scope) => issue(userId, clientId, scope),
    isKnownClient(clientId) {
      return clientId !== "" && (options.clientId === undefined || clientId === options.clientId);
    },
    startDevice(clientId, scope) {
      const userCode = unusedUserCode();
      const device: DeviceRecord = {
        deviceCode: randomHex(32),
        userCode,
        clientId,
        scope: scope?.trim() || DEFAULT_SCOPE,
        expiresAt: clock.now() + deviceExpiresInSeconds * 1000,
        status: "pending",
      };
      devicesByCode.set(device.deviceCode, device);
      devicesByUserCode.set(normalizeUserCode(userCode), device);
      latestUserCode = userCode;
      return device;
    },
    deviceByCode: (deviceCode) => devicesByCode.get(deviceCode),
    isExpired,
    decide,
    consumeDevice(device, withRefresh) {
      device.status = "consumed";
      return issue(device.userId!, device.clientId, device.scope, withRefresh);
    },
    tokensByRefreshToken: (refreshToken) => tokensByRefresh.get(refreshToken),
    rotate(old, clientId, withRefresh) {
      revokeRecord(old);
      return issue(old.userId, clientId, old.scope, withRefresh);
    },
    liveAccessToken(accessToken) {
      const record = tokensByAccess.get(accessToken);
      if (record === undefined || record.revoked || clock.now() >= record.expiresAt) {
        return undefined;
      }
      return record;
    },
    takeFailure: (endpoint) => failures[endpoint].shift(),
    rateLimitSecondsLeft: () => Math.max(0, Math.ceil((rateLimitedUntil - clock.now()) / 1000)),
    rateLimit(seconds) {
      rateLimitedUntil = clock.now() + seconds * 1000;
    },

    approve(userCode, userId = users[0].id) {
      const outcome = decide(userCode, true, userId);
      if (outcome !== "approved") {
        throw new Error(`simulated GitLab: cannot approve ${userCode}: ${outcome}`);
      }
    },
    deny(userCode) {
      const outcome = decide(userCode, false, users[0].id);
      if (outcome !== "denied") {
        throw new Error(`simulated GitLab: cannot deny ${userCode}: ${outcome}`);
      }
    },
    expireDevice(userCode) {
      const device = findDevice(userCode);
      if (device === undefined) throw new Error(`simulated GitLab: unknown user code ${userCode}`);
      device.expiresAt = clock.now() - 1;
    },
    lastUserCode: () => latestUserCode,
    failNext(endpoint, mode) {
      if (!FAILURES_BY_ENDPOINT[endpoint]?.includes(mode)) {
        throw new TypeError(`simulated GitLab: ${endpoint} cannot fail with ${mode}`);
      }
      failures[endpoint].push(mode);
    },
    issueTokens(userId = users[0].id) {
      findUser(userId);
      // Bound to no client: whichever client id refreshes it is accepted.
      const record = issue(userId, options.clientId ?? "", DEFAULT_SCOPE);
      return {
        accessToken: record.accessToken,
        refreshToken: record.refreshToken,
        expiresIn: accessTokenTtlSeconds,
      };
    },
    revoke: revokeToken,
    ...groups,
  };
}

type GroupControls = Pick<
  SimulatedGitLabControls,
  "addGroup" | "setMembership" | "memberAccessLevel" | "memberLookups"
>;

/** Groups and their direct members; GitLab paths match in any case. */
function createGroups(paths: string[], memberships: SimulatedMembership[]): GroupControls {
  const members = new Map<string, Map<number, number>>();
  const key = (path: string) => path.toLowerCase().replace(/^\/+|\/+$/g, "");
  const addGroup = (path: string) => {
    if (!members.has(key(path))) members.set(key(path), new Map());
  };
  const setMembership = (group: string, userId: number, accessLevel: number | null) => {
    addGroup(group);
    if (accessLevel === null) members.get(key(group))!.delete(userId);
    else members.get(key(group))!.set(userId, accessLevel);
  };
  paths.forEach(addGroup);
  for (const { group, userId, accessLevel } of memberships) {
    setMembership(group, userId, accessLevel);
  }
  return {
    memberLookups: [],
    addGroup,
    setMembership,
    memberAccessLevel(group, userId) {
      if (!members.has(key(group))) return undefined;
      // The group itself and every ancestor: `a/b/c`, `a/b`, `a`.
      const segments = key(group).split("/");
      const levels = segments.map((_, i) => segments.slice(0, i + 1).join("/"))
        .map((path) => members.get(path)?.get(userId))
        .filter((level): level is number => level !== undefined);
      return levels.length === 0 ? null : Math.max(...levels);
    },
  };
}

/** Matches user codes the way people type them: any case, dash or blanks optional. */
function normalizeUserCode(userCode: string): string {
  return userCode.toUpperCase().replace(/[^A-Z0-9]/g, "");
}

function newUserCode(): string {
  const pick = (alphabet: string, count: number) =>
    Array.from(crypto.getRandomValues(new Uint32Array(count)), (n) => alphabet[n % alphabet.length])
      .join("");
  return `${pick(USER_CODE_LETTERS, 4)}-${pick(USER_CODE_DIGITS, 4)}`;
}

function randomHex(bytes: number): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(bytes)),
    (b) => b.toString(16).padStart(2, "0"),
  )
    .join("");
}
