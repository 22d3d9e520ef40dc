/**
 * The records the service stores. Field names follow spec §2.1–2.3; where a field would hold a
 * secret we keep what we need of it instead (see docs/security.md "Storage").
 */

/** Upstream tokens with an absolute expiry (0 when the upstream gave no `expires_in`). */
export interface UpstreamTokenSet {
  accessToken: string;
  refreshToken: string;
  /** Epoch milliseconds; 0 means unknown, never refreshed proactively. */
  expiresAt: number;
}

/** A session's upstream tokens, opened: what is sealed in `SessionRecord.sealedUpstreamTokens`. */
export type UpstreamTokenPair = Pick<UpstreamTokenSet, "accessToken" | "refreshToken">;

/**
 * Upstream tokens with their lifetime turned into an absolute expiry (0: none given). Takes the
 * provider's answer structurally, so records depend on no upstream module.
 */
export function upstreamTokenSet(
  tokens: { accessToken: string; refreshToken: string; expiresInSeconds?: number },
  nowMs: number,
): UpstreamTokenSet {
  return {
    accessToken: tokens.accessToken,
    refreshToken: tokens.refreshToken,
    expiresAt: tokens.expiresInSeconds === undefined ? 0 : nowMs + tokens.expiresInSeconds * 1000,
  };
}

/** A device flow between `/authorize` and its completion (spec §2.1), keyed by the flow state. */
export interface FlowRecord {
  deviceCode: string;
  userCode: string;
  verificationUri: string;
  verificationUriComplete?: string;
  /** Epoch ms: creation plus upstream `expires_in`. */
  expiresAt: number;
  intervalSeconds: number;
  /** Epoch ms before which the upstream is not polled again: `interval` after its last answer. */
  nextPollAt?: number;
  clientId: string;
  codeChallenge: string;
  codeChallengeMethod: string;
  /** Empty string when `/authorize` had none. */
  state: string;
  redirectUri?: string;
  /**
   * The client named no redirect_uri and its sole registered one was used: `/token` need not
   * name it (spec: required only if one was given to `/authorize`).
   */
  redirectUriImplied?: true;
  /** The MCP server the client asked a token for (RFC 8707); absent in flows from before. */
  resource?: string;
  /** The hash of the `/authorize` request that started it, when identical ones may share it. */
  /**
   * A sign-in for a device authorization (`/device`), by its user code's hash: completing it
   * stores the session for the user's Approve / Deny instead of issuing a code.
   */
  deviceUserCodeHash?: string;
  requestHash?: string;
  /**
   * The client prefix (IPv4 /24, IPv6 /56) that started it, counted by the pending-flow caps and
   * the GitLab poll budget; absent when its client is exempt (loopback, RATE_LIMIT_EXEMPT) or it
   * predates them.
   */
  clientPrefix?: string;
  /**
   * Its client is in RATE_LIMIT_EXEMPT: its GitLab polls still come out of the poll budget (which
   * is GitLab's limit on this service), but no prefix's share caps them. Absent: a loopback
   * client's flow (or one with a prefix) is not counted so.
   */
  exemptFromShare?: true;
  /**
   * Set the moment the upstream returns a token, before the user lookup: the device code is spent
   * then, so a failed lookup must be retried with these instead of polling again.
   */
  upstreamTokens?: UpstreamTokenSet;
}

/**
 * A redirect sign-in (GITLAB_SIGN_IN=redirect): the authorization request, the browser it
 * belongs to, and the step it waits on: our consent page, or the upstream's callback.
 */
export interface SignInRecord {
  clientId: string;
  codeChallenge: string;
  codeChallengeMethod: string;
  /** Empty string when `/authorize` had none. */
  state: string;
  redirectUri: string;
  /**
   * The client named no redirect_uri and its sole registered one was used: `/token` need not
   * name it (spec: required only if one was given to `/authorize`).
   */
  redirectUriImplied?: true;
  /** The protected resource the tokens will be bound to (RFC 8707). */
  resource?: string;
  /** SHA-256 of the browser cookie the sign-in is bound to (login CSRF). */
  browserHash: string;
  /** On the consent page: SHA-256 of the CSRF token the page's form carries. */
  csrfHash?: string;
  /** Sent upstream: the PKCE verifier of the upstream authorization (sealed at rest). */
  upstreamVerifier?: string;
  /** Epoch ms: each step lives 10 minutes. */
  expiresAt: number;
  /**
   * A sign-in for a device authorization (`/device`), by its user code's hash: completing it
   * stores the session for the user's Approve / Deny instead of returning a code.
   */
  deviceUserCodeHash?: string;
}

/** A single-use authorization code (spec §2.2), keyed by the code's hash. */
export interface CodeRecord {
  sessionId: string;
  clientId: string;
  codeChallenge: string;
  codeChallengeMethod: string;
  redirectUri?: string;
  /**
   * The client named no redirect_uri and its sole registered one was used: `/token` need not
   * name it (spec: required only if one was given to `/authorize`).
   */
  redirectUriImplied?: true;
  /** Epoch ms: creation plus 10 minutes. */
  expiresAt: number;
  /** Set when REVOKE_ON_CODE_REPLAY keeps a redeemed code to recognise its replay. */
  redeemedAt?: number;
}

/**
 * A device authorization (RFC 8628 §3.1) from `/device_authorization` until its device code is
 * redeemed at `/token`, keyed by the device code's hash (and found by the user code's hash).
 */
export interface DeviceAuthorizationRecord {
  clientId: string;
  /** The scopes the client asked, as sent (a subset of the granted ones). */
  scope?: string;
  /** The RFC 8707 resource the tokens will be bound to. */
  resource: string;
  /** The hash its user code is keyed by (to delete that key with it). */
  userCodeHash: string;
  /** Epoch ms: creation plus DEVICE_CODE_TTL. */
  expiresAt: number;
  /** The polling interval in seconds (grows by 5 with each `slow_down`). */
  intervalSeconds: number;
  /** Epoch ms of the client's last poll. */
  lastPollAt?: number;
  /**
   * `signed_in`: the user signed in (`sessionId`) and has not said yes or no yet; `approved`:
   * `sessionId` names the session to be redeemed once.
   */
  status: "pending" | "signed_in" | "approved" | "denied";
  sessionId?: string;
  /** The hash of the browser binding of the first browser that entered the user code. */
  browserHash?: string;
}

/**
 * A sign-in whose code has not been redeemed: what is needed to revoke its GitLab tokens once
 * the code expired unused (its session expires with the code).
 */
/** The GitLab token of a device flow that has it but has not completed (sealed, as a session's). */
export interface StrandedTokens {
  sealedUpstreamTokens: string;
}

/** A session's entry in the idle index (the key names it; see src/store/idle_sessions.ts). */
export interface IdleSessionEntry {
  sessionId: string;
}

export interface UnredeemedSignIn {
  sessionId: string;
  /** The session's `sealedUpstreamTokens`. */
  sealedUpstreamTokens: string;
}

/** A signed-in user's session (spec §2.3). */
export interface SessionRecord {
  id: string;
  /** SHA-256 of the current refresh token; empty until the first `/token` exchange. */
  mcpRefreshTokenHash: string;
  /** Epoch ms expiry of the last issued access token; 0 until the first exchange. */
  mcpTokenExpiry: number;
  /**
   * The upstream access and refresh token, sealed (AES-GCM, see secret_box.ts). They stay sealed
   * in memory too, and are opened (`store.openUpstreamTokens`) only where one is used: an
   * upstream refresh, a gateway call, a revocation. A grant that does not touch the upstream
   * never decrypts them.
   */
  sealedUpstreamTokens: string;
  /** Epoch ms; 0 when the upstream gave no `expires_in`. */
  upstreamTokenExpiry: number;
  /** The provider's user id, as text (records written before 2026-11 hold GitLab's number). */
  upstreamUserId: string;
  upstreamUsername: string;
  clientId: string;
  /**
   * The MCP server its tokens are for (RFC 8707). Absent in sessions from before resource
   * indicators: those are for the MCP server this service protects.
   */
  resource?: string;
  scopes: string[];
  createdAt: number;
  updatedAt: number;
  /** Epoch ms after which the session is forgotten (inactivity lifetime, renewed on refresh). */
  expiresAt: number;
  /**
   * The day (whole days since the epoch) of the idle index entry that has the session's GitLab
   * token revoked once it expired (src/store/idle_sessions.ts); absent: not indexed (before its
   * code is redeemed, or stored before the index existed), and KV drops it at its expiry.
   */
  idleDay?: number;
  /**
   * When ALLOWED_GITLAB_GROUPS or ALLOWED_GITLAB_USERS is set: what admitted the session and its
   * user's access level per listed group, from the sign-in and then each re-check. Absent in
   * sessions signed in while anyone was admitted.
   */
  access?: SessionAccess;
  /**
   * Opt-in (REFRESH_GRACE_SECONDS): the previous refresh token's hash, and the sealed response
   * that token may fetch once more until `untilMs`.
   */
  previousRefresh?: { hash: string; untilMs: number; sealedResponse: string };
  /**
   * Opt-in (REVOKE_ON_REFRESH_REPLAY): the hash of the refresh token the last rotation replaced,
   * and when, so that token presented again ends the session (RFC 9700 §4.14.2).
   */
  replacedRefresh?: { hash: string; rotatedAt: number };
}

/**
 * Who admitted a session, kept on its record: a gateway policy reads `groupLevels` from here
 * instead of asking GitLab per call (`src/access/policy.ts` decides).
 */
export interface SessionAccess {
  /** Epoch ms of the last decision GitLab answered (the sign-in's, then each re-check's). */
  checkedAt: number;
  /** The user's `access_level` in each listed group they belong to (inherited included). */
  groupLevels: Record<string, number>;
  /** The listed groups whose role the user meets: what admitted the session. */
  admittingGroups: string[];
  /** Whether ALLOWED_GITLAB_USERS names the user. */
  listedUser: boolean;
  /**
   * Every group asked, when MCP_POLICY_FILE named groups beyond ALLOWED_GITLAB_GROUPS; absent:
   * the listed groups were asked. A group asked is one whose absence means "not a member".
   */
  groupsAsked?: string[];
}

/** A session as stored before the provider-neutral names (GitLab was the only upstream). */
interface LegacySessionFields {
  sealedGitLabTokens?: string;
  gitlabTokenExpiry?: number;
  gitlabUserId?: number;
  gitlabUsername?: string;
}

/** A session as stored before user ids were text. */
type NumericUserIdSession = Omit<SessionRecord, "upstreamUserId"> & {
  upstreamUserId: string | number;
};

/**
 * A stored session under today's field names and types, whichever it was written with: the
 * provider-neutral names, and the user id as text.
 */
export function sessionFromStored(
  stored: NumericUserIdSession & LegacySessionFields,
): SessionRecord {
  if (stored.sealedUpstreamTokens !== undefined || stored.sealedGitLabTokens === undefined) {
    const { upstreamUserId } = stored;
    return typeof upstreamUserId === "string"
      ? stored as SessionRecord
      : { ...stored, upstreamUserId: String(upstreamUserId) };
  }
  const { sealedGitLabTokens, gitlabTokenExpiry, gitlabUserId, gitlabUsername, ...rest } = stored;
  return {
    ...rest,
    sealedUpstreamTokens: sealedGitLabTokens,
    upstreamTokenExpiry: gitlabTokenExpiry ?? 0,
    upstreamUserId: String(gitlabUserId ?? 0),
    upstreamUsername: gitlabUsername ?? "",
  };
}

/** A registered client. */
export interface ClientRecord {
  clientId: string;
  /** Epoch seconds. */
  clientIdIssuedAt: number;
  redirectUris: string[];
  clientName?: string;
  /** The validated metadata exactly as echoed in the registration response (wire names). */
  metadata: ClientMetadata;
  /**
   * Epoch ms after which the registration is forgotten: a day after registration, 30 days
   * after the last `/authorize` that used it. Absent on records stored before expiry existed.
   */
  expiresAt?: number;
}

/** A validated Client ID Metadata Document, as the service keeps it. */
export interface ClientMetadataDocument {
  /** The document's URL, which is the client id. */
  clientId: string;
  redirectUris: string[];
  clientName?: string;
  /** The grant types it lists that the service knows; absent: the default ones. */
  grantTypes?: string[];
}

/** A fetched metadata document, shared by every instance through KV. */
export interface ClientDocumentRecord {
  document: ClientMetadataDocument;
  /** Epoch ms: used without a fetch until then (its `max-age`, at most 24 hours). */
  refreshAfter: number;
  /** Epoch ms: kept until then (its `max-age` clamped to 5 minutes … 24 hours). */
  expiresAt: number;
}

/** The registration metadata we accept and echo (RFC 7591 §2); unknown fields are dropped. */
export interface ClientMetadata {
  redirect_uris: string[];
  token_endpoint_auth_method: "none";
  grant_types: string[];
  response_types: string[];
  client_name?: string;
  client_uri?: string;
  logo_uri?: string;
  tos_uri?: string;
  policy_uri?: string;
  scope?: string;
  contacts?: string[];
  software_id?: string;
  software_version?: string;
}
