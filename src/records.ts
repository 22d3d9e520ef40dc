/**
 * The records the service stores. Field names follow spec §2.1–2.3; where a field would hold a
 * secret we keep what we need of it instead (see README "Storage").
 */

/** Upstream tokens with an absolute expiry (0 when GitLab gave no `expires_in`). */
export interface UpstreamTokenSet {
  accessToken: string;
  refreshToken: string;
  /** Epoch milliseconds; 0 means unknown, never refreshed proactively. */
  expiresAt: number;
}

/** A session's GitLab tokens, opened. */
export interface GitLabTokens {
  accessToken: string;
  refreshToken: string;
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
  /** Epoch ms before which GitLab is not polled again (set after `slow_down`, RFC 8628 §3.5). */
  nextPollAt?: number;
  clientId: string;
  codeChallenge: string;
  codeChallengeMethod: string;
  /** Empty string when `/authorize` had none. */
  state: string;
  redirectUri?: string;
  /**
   * Set the moment GitLab returns a token, before the user lookup: the device code is spent
   * then, so a failed lookup must be retried with these instead of polling again.
   */
  upstreamTokens?: UpstreamTokenSet;
}

/** A single-use authorization code (spec §2.2), keyed by the code's hash. */
export interface CodeRecord {
  sessionId: string;
  clientId: string;
  codeChallenge: string;
  codeChallengeMethod: string;
  redirectUri?: string;
  /** Epoch ms: creation plus 10 minutes. */
  expiresAt: number;
  /** Set when REVOKE_ON_CODE_REPLAY keeps a redeemed code to recognise its replay. */
  redeemedAt?: number;
}

/** A signed-in user's session (spec §2.3). */
export interface SessionRecord {
  id: string;
  /** SHA-256 of the current refresh token; empty until the first `/token` exchange. */
  mcpRefreshTokenHash: string;
  /** Epoch ms expiry of the last issued access token; 0 until the first exchange. */
  mcpTokenExpiry: number;
  /**
   * The GitLab access and refresh token, sealed (AES-GCM, see secret_box.ts). They stay sealed
   * in memory too, and are opened (`store.openGitLabTokens`) only where one is used: an
   * upstream refresh, a gateway call, a revocation. A grant that does not touch GitLab never
   * decrypts them.
   */
  sealedGitLabTokens: string;
  /** Epoch ms; 0 when GitLab gave no `expires_in`. */
  gitlabTokenExpiry: number;
  gitlabUserId: number;
  gitlabUsername: string;
  clientId: string;
  scopes: string[];
  createdAt: number;
  updatedAt: number;
  /** Epoch ms after which the session is forgotten (inactivity lifetime, renewed on refresh). */
  expiresAt: number;
  /**
   * Opt-in (REFRESH_GRACE_SECONDS): the previous refresh token's hash, and the sealed response
   * that token may fetch once more until `untilMs`.
   */
  previousRefresh?: { hash: string; untilMs: number; sealedResponse: string };
}
