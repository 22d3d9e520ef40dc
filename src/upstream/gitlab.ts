/**
 * The GitLab implementation of `Upstream`, over HTTP: the device authorization grant
 * (RFC 8628), the authorization code grant with PKCE (RFC 6749 §4.1, RFC 7636), the
 * refresh-token grant (RFC 6749 §6) and the current-user API.
 *
 * Every call is split in two, after the style of panva/oauth4webapi: a request (built and sent
 * here, with a timeout) and a `processX(response)` validator that reads the body exactly once and
 * either returns a typed value or throws `UpstreamError`. The validators never put a token, a
 * device code or any text from the response body into an error message: terminal errors carry
 * the bare OAuth error code, transient ones a fixed description of ours.
 *
 * @see https://docs.gitlab.com/api/oauth2/#device-authorization-grant-flow
 */

import {
  type AuthorizationCodeGrant,
  type AuthorizationRedirect,
  type DeviceAuthorization,
  type DevicePollResult,
  type Upstream,
  type UpstreamBackoff,
  UpstreamError,
  type UpstreamTokens,
  type UpstreamUser,
} from "./types.ts";

const DEVICE_CODE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code";
/** RFC 8628 §3.2: the interval to use when the provider names none. */
const DEFAULT_INTERVAL_SECONDS = 5;
/**
 * The shape of the OAuth error codes we classify and report (RFC 6749 §5.2, RFC 8628 §3.5): lower
 * case words joined by `_`. Anything else (which could be a token echoed back) is not repeated.
 */
const ERROR_CODE_PATTERN = /^(?=.{1,64}$)[a-z]+(?:_[a-z]+)*$/;
/** A `RateLimit-Reset` at least this large is a Unix time (2001), smaller is seconds from now. */
const UNIX_TIME_FLOOR_SECONDS = 1_000_000_000;

/** Where the client reports transient failures; structurally a subset of the service's Logger. */
export interface UpstreamLogger {
  warn(message: string, fields?: Record<string, string | number | boolean | undefined>): void;
}

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
}

/** Creates the GitLab upstream client; throws TypeError/RangeError on unusable options. */
export function createGitLabUpstream(options: GitLabUpstreamOptions): Upstream {
  const { clientId, scopes, timeoutMs, logger } = options;
  if (options.gitlabUrl.protocol !== "https:" && options.gitlabUrl.protocol !== "http:") {
    throw new TypeError("gitlabUrl must be an http: or https: URL");
  }
  if (clientId === "") throw new TypeError("clientId must not be empty");
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new RangeError("timeoutMs must be a positive number");
  }
  const fetchImpl = options.fetch ?? globalThis.fetch;
  const endpoints = {
    authorizeDevice: gitlabEndpoint(options.gitlabUrl, "oauth/authorize_device"),
    authorize: gitlabEndpoint(options.gitlabUrl, "oauth/authorize"),
    token: gitlabEndpoint(options.gitlabUrl, "oauth/token"),
    user: gitlabEndpoint(options.gitlabUrl, "api/v4/user"),
    revoke: gitlabEndpoint(options.gitlabUrl, "oauth/revoke"),
  };

  async function send(url: URL, init: RequestInit): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set("Accept", "application/json");
    try {
      return await fetchImpl(url.href, {
        ...init,
        headers,
        // A redirect would re-send the form (or drop the bearer header); treat it as an error.
        redirect: "manual",
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (error) {
      throw transportError(error);
    }
  }

  function postForm(url: URL, fields: Record<string, string>): Promise<Response> {
    return send(url, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8" },
      body: new URLSearchParams(fields),
    });
  }

  /** Runs one call; logs transient failures and turns anything unforeseen into one. */
  async function call<T>(operation: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      const failure = error instanceof UpstreamError
        ? error
        : new UpstreamError("transient", "unexpected", "upstream call failed unexpectedly");
      if (failure.failure === "transient") {
        logger?.warn("upstream call failed", {
          operation,
          code: failure.code,
          reason: failure.message,
        });
      }
      throw failure;
    }
  }

  return {
    profile: { displayName: "GitLab", url: options.gitlabUrl, scopes },
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
        return await processAuthorizationCodeResponse(response);
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
        return await processRefreshTokenResponse(response);
      }),

    fetchUser: (accessToken: string) =>
      call("fetch_user", async () => {
        const response = await send(endpoints.user, {
          method: "GET",
          headers: { Authorization: `Bearer ${accessToken}` },
        });
        return await processUserResponse(response);
      }),

    revokeToken: (token: string) =>
      call("revoke_token", async () => {
        const response = await postForm(endpoints.revoke, { token, client_id: clientId });
        return await processRevocationResponse(response);
      }),
  };
}

/** Resolves a path below the GitLab base URL, keeping a sub-path the instance is served under. */
export function gitlabEndpoint(gitlabUrl: URL, path: string): URL {
  const base = new URL(gitlabUrl.href);
  base.search = "";
  base.hash = "";
  if (!base.pathname.endsWith("/")) base.pathname += "/";
  return new URL(path.replace(/^\/+/, ""), base);
}

/**
 * The GitLab authorization URL of a redirect sign-in (RFC 6749 §4.1.1 with RFC 7636 S256):
 * `response_type=code`, our client id and callback, the scopes, the state and the challenge.
 */
export function authorizationUrl(
  endpoint: URL,
  clientId: string,
  scopes: string,
  redirect: AuthorizationRedirect,
): URL {
  const url = new URL(endpoint);
  url.search = new URLSearchParams({
    client_id: clientId,
    redirect_uri: redirect.redirectUri,
    response_type: "code",
    scope: scopes,
    state: redirect.state,
    code_challenge: redirect.codeChallenge,
    code_challenge_method: "S256",
  }).toString();
  return url;
}

/** Validates an authorization code grant response (RFC 6749 §4.1.4) and consumes its body. */
export function processAuthorizationCodeResponse(response: Response): Promise<UpstreamTokens> {
  return processTokenResponse(response);
}

/** Validates a device authorization response (RFC 8628 §3.2) and consumes its body. */
export async function processDeviceAuthorizationResponse(
  response: Response,
): Promise<DeviceAuthorization> {
  const body = await readBody(response);
  if (response.status !== 200) throw oauthFailure(response.status, body);
  const json = parseJsonObject(body, "device authorization");
  const verificationUriComplete = optional(json.verification_uri_complete);
  const interval = optional(json.interval);
  return {
    deviceCode: requireNonEmptyString(json.device_code, "device authorization"),
    userCode: requireNonEmptyString(json.user_code, "device authorization"),
    verificationUri: requireHttpUrl(json.verification_uri, "device authorization"),
    ...(verificationUriComplete === undefined ? {} : {
      verificationUriComplete: requireHttpUrl(verificationUriComplete, "device authorization"),
    }),
    expiresInSeconds: requirePositiveNumber(json.expires_in, "device authorization"),
    intervalSeconds: interval === undefined
      ? DEFAULT_INTERVAL_SECONDS
      : requireNonNegativeNumber(interval, "device authorization"),
  };
}

/**
 * Classifies a device access token response (RFC 8628 §3.5) as token, pending or slow_down, or
 * throws UpstreamError; consumes the body.
 */
export async function processDeviceTokenResponse(response: Response): Promise<DevicePollResult> {
  const body = await readBody(response);
  const backoff = backoffOf(response);
  if (response.status === 429) return { kind: "rate_limited", backoff: backoff ?? {} };
  const withBackoff = backoff ? { backoff } : {};
  if (response.status === 200) return { kind: "token", tokens: parseTokens(body), ...withBackoff };
  const code = oauthErrorCode(response.status, body);
  if (code === "authorization_pending") return { kind: "pending", ...withBackoff };
  if (code === "slow_down") return { kind: "slow_down", ...withBackoff };
  throw oauthFailure(response.status, body);
}

/**
 * The pause an answer asks for: on HTTP 429 or `RateLimit-Remaining: 0`, what `Retry-After`
 * (seconds or HTTP date) and `RateLimit-Reset` say; undefined when the answer asks for none.
 * GitLab sends `RateLimit-Reset` as a Unix time; a small number is read as seconds from now
 * (the IETF draft's form).
 *
 * @see RFC 9110 §10.2.3, https://docs.gitlab.com/security/rate_limits/
 */
export function backoffOf(response: Response): UpstreamBackoff | undefined {
  const remaining = response.headers.get("RateLimit-Remaining")?.trim();
  if (response.status !== 429 && remaining !== "0") return undefined;
  const backoff: UpstreamBackoff = {};
  const retryAfter = response.headers.get("Retry-After")?.trim() ?? "";
  const reset = response.headers.get("RateLimit-Reset")?.trim() ?? "";
  if (/^\d{1,10}$/.test(retryAfter)) {
    backoff.retryAfterSeconds = Number(retryAfter);
  } else if (retryAfter !== "" && Number.isFinite(Date.parse(retryAfter))) {
    backoff.resumeAtEpochSeconds = Math.ceil(Date.parse(retryAfter) / 1000);
  } else if (/^\d{1,10}$/.test(reset)) {
    const value = Number(reset);
    if (value >= UNIX_TIME_FLOOR_SECONDS) backoff.resumeAtEpochSeconds = value;
    else backoff.retryAfterSeconds = value;
  }
  return backoff;
}

/** Validates a refresh-token grant response (RFC 6749 §5.1) and consumes its body. */
export function processRefreshTokenResponse(response: Response): Promise<UpstreamTokens> {
  return processTokenResponse(response);
}

/** A token endpoint's answer (RFC 6749 §5.1/§5.2): tokens, or UpstreamError. */
async function processTokenResponse(response: Response): Promise<UpstreamTokens> {
  const body = await readBody(response);
  if (response.status === 200) return parseTokens(body);
  throw oauthFailure(response.status, body);
}

/** Validates a `GET /api/v4/user` response and consumes its body. */
export async function processUserResponse(response: Response): Promise<UpstreamUser> {
  const body = await readBody(response);
  if (response.status === 401 || response.status === 403) {
    throw new UpstreamError("terminal", "invalid_token", "invalid_token");
  }
  if (response.status !== 200) throw httpFailure(response.status);
  const json = parseJsonObject(body, "user");
  if (typeof json.id !== "number" || !Number.isSafeInteger(json.id)) throw malformed("user");
  return { id: json.id, username: requireNonEmptyString(json.username, "user") };
}

/** Checks a revocation response (RFC 7009 §2.2: 200 whether or not the token was known). */
export async function processRevocationResponse(response: Response): Promise<void> {
  const body = await readBody(response);
  if (response.status !== 200) throw oauthFailure(response.status, body);
}

// ---------------------------------------------------------------------------------------------
// Classification

/** RFC 8628 §3.5 and RFC 6749 §5.2 codes after which the same request can never succeed. */
function isTerminalCode(code: string): boolean {
  return code === "access_denied" || code === "expired_token" || code.startsWith("invalid_");
}

/** The OAuth `error` code of a 4xx answer (429 excepted), when it has a plausible one. */
function oauthErrorCode(status: number, body: string): string | undefined {
  if (status < 400 || status >= 500 || status === 429) return undefined;
  const json = parseJson(body);
  if (!isObject(json) || typeof json.error !== "string") return undefined;
  return ERROR_CODE_PATTERN.test(json.error) ? json.error : undefined;
}

/** The error for a non-success answer of an OAuth endpoint. */
function oauthFailure(status: number, body: string): UpstreamError {
  const code = oauthErrorCode(status, body);
  if (code === undefined) return httpFailure(status);
  // The message is the bare code: the service reports it and classifies it by its words.
  if (isTerminalCode(code)) return new UpstreamError("terminal", code, code);
  return new UpstreamError(
    "transient",
    code,
    `upstream answered HTTP ${status} with an unrecognized OAuth error`,
  );
}

function httpFailure(status: number): UpstreamError {
  if (status === 429) {
    return new UpstreamError("transient", "http_429", "upstream is rate limiting (HTTP 429)");
  }
  return new UpstreamError("transient", `http_${status}`, `upstream answered HTTP ${status}`);
}

function malformed(what: string): UpstreamError {
  return new UpstreamError("transient", "malformed", `upstream ${what} response is malformed`);
}

/** Maps what fetch or a body read threw; the cause's own text is left out on purpose. */
function transportError(error: unknown): UpstreamError {
  if (error instanceof UpstreamError) return error;
  if (
    error instanceof DOMException &&
    (error.name === "TimeoutError" || error.name === "AbortError")
  ) {
    return new UpstreamError("transient", "timeout", "upstream request timed out");
  }
  return new UpstreamError("transient", "network", "upstream could not be reached");
}

// ---------------------------------------------------------------------------------------------
// Parsing

async function readBody(response: Response): Promise<string> {
  try {
    return await response.text();
  } catch (error) {
    throw transportError(error);
  }
}

function parseJson(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

function parseJsonObject(body: string, what: string): Record<string, unknown> {
  const json = parseJson(body);
  if (!isObject(json)) throw malformed(what);
  return json;
}

function parseTokens(body: string): UpstreamTokens {
  const json = parseJsonObject(body, "token");
  const accessToken = requireNonEmptyString(json.access_token, "token");
  const tokenType = optional(json.token_type);
  if (
    tokenType !== undefined &&
    (typeof tokenType !== "string" || tokenType.toLowerCase() !== "bearer")
  ) {
    throw malformed("token");
  }
  const refreshToken = optional(json.refresh_token);
  if (refreshToken !== undefined && typeof refreshToken !== "string") throw malformed("token");
  const expiresIn = optional(json.expires_in);
  return {
    accessToken,
    refreshToken: refreshToken ?? "",
    ...(expiresIn === undefined
      ? {}
      : { expiresInSeconds: requireNonNegativeNumber(expiresIn, "token") }),
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `null` and absent are the same to us. */
function optional(value: unknown): unknown {
  return value === null ? undefined : value;
}

function requireNonEmptyString(value: unknown, what: string): string {
  if (typeof value !== "string" || value === "") throw malformed(what);
  return value;
}

function requireHttpUrl(value: unknown, what: string): string {
  const text = requireNonEmptyString(value, what);
  // The page links to it: anything but http(s) (say, `javascript:`) is refused.
  if (!URL.canParse(text)) throw malformed(what);
  const { protocol } = new URL(text);
  if (protocol !== "https:" && protocol !== "http:") throw malformed(what);
  return text;
}

function requirePositiveNumber(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) throw malformed(what);
  return value;
}

function requireNonNegativeNumber(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) throw malformed(what);
  return value;
}
