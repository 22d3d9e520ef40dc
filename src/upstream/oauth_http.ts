/**
 * The provider-neutral half of an upstream client: sending OAuth requests (with a time limit,
 * redirects refused, transport errors mapped onto `UpstreamError`) and the `processX(response)`
 * validators of RFC 6749 and RFC 8628 answers. A provider module (gitlab.ts) adds its endpoints,
 * its user API and its quirks (`OAuthQuirks`).
 *
 * Every call is split in two, after the style of panva/oauth4webapi: a request (built and sent
 * here, with a timeout) and a validator that reads the body exactly once and either returns a
 * typed value or throws `UpstreamError`. The validators never put a token, a device code or any
 * text from the response body into an error message: terminal errors carry the bare OAuth error
 * code, transient ones a fixed description of ours.
 *
 * @see RFC 6749 §5 (token responses), RFC 8628 §3.2 and §3.5 (device flow), RFC 7009 §2.2
 */

import type {
  AuthorizationRedirect,
  DeviceAuthorization,
  DevicePollResult,
  UpstreamBackoff,
  UpstreamTokens,
} from "./types.ts";
import { UpstreamError } from "./types.ts";
import { parseWebUrl } from "../http/web_url.ts";
import {
  isObject,
  malformed,
  optional,
  parseJson,
  parseJsonObject,
  parseTokens,
  readBody,
  requireNonNegativeNumber,
  requirePositiveNumber,
  requireVsChars,
  transportError,
} from "./oauth_parse.ts";

export {
  malformed,
  parseJsonObject,
  readBody,
  requireNonEmptyString,
  transportError,
} from "./oauth_parse.ts";

/** RFC 8628 §3.2: the interval to use when the provider names none. */
const DEFAULT_INTERVAL_SECONDS = 5;
/** Longest device flow taken from `expires_in` (GitLab's last five minutes). */
const MAX_DEVICE_FLOW_SECONDS = 3600;
/** Longest poll interval taken from `interval`. */
const MAX_POLL_INTERVAL_SECONDS = 300;
/**
 * The shape of the OAuth error codes we classify and report (RFC 6749 §5.2, RFC 8628 §3.5): lower
 * case words joined by `_`. Anything else (which could be a token echoed back) is not repeated.
 */
const ERROR_CODE_PATTERN = /^(?=.{1,64}$)[a-z]+(?:_[a-z]+)*$/;
/** A `RateLimit-Reset` at least this large is a Unix time (2001), smaller is seconds from now. */
const UNIX_TIME_FLOOR_SECONDS = 1_000_000_000;

/** Where the client reports failures; structurally a subset of the service's Logger. */
export interface UpstreamLogger {
  warn(message: string, fields?: Record<string, string | number | boolean | undefined>): void;
}

/** How a provider departs from the letter of the RFCs. */
export interface OAuthQuirks {
  /**
   * The token endpoint answers its errors (`authorization_pending`, `slow_down`, `access_denied`,
   * ...) with HTTP 200 and an `error` member instead of HTTP 400, as GitHub does.
   */
  errorsWithStatus200?: boolean;
}

/**
 * What the operator should check when the provider refuses our application itself (a wrong
 * client id or secret, scopes it does not know, an endpoint it does not have): the names of the
 * settings, e.g. `GITLAB_CLIENT_ID`. Logged with the provider's status and error code.
 */
export interface MisconfigurationHints {
  /** Named on `invalid_client` and `unauthorized_client`. */
  client: string;
  /** Named on `invalid_scope`. */
  scopes: string;
  /** Named on HTTP 404 (no such endpoint: the base URL is wrong). */
  url: string;
}

/** How the client sends. */
export interface OAuthHttpOptions {
  /** Time limit of each request, response body included, in milliseconds. */
  timeoutMs: number;
  /** Replaces the global `fetch` (tests, proxies). */
  fetch?: typeof fetch;
  /** Receives a line for every transient failure and every refusal of our application. */
  logger?: UpstreamLogger;
  /** Names the settings to check when the provider refuses our application. */
  hints?: MisconfigurationHints;
  /** Told every request's status, or `timeout` or `network` when none came (metrics). */
  onResponse?: (url: URL, result: number | "timeout" | "network") => void;
}

/** Sends the requests of one provider's client. */
export interface OAuthHttpClient {
  /** Sends with `Accept: application/json`, the time limit, and redirects refused. */
  send(url: URL, init: RequestInit): Promise<Response>;
  /** POSTs `fields` form-encoded. */
  postForm(url: URL, fields: Record<string, string>): Promise<Response>;
  /** Runs one call; logs what the operator should see and turns anything unforeseen transient. */
  call<T>(operation: string, run: () => Promise<T>): Promise<T>;
}

/** The sending half; throws RangeError on an unusable time limit. */
export function createOAuthHttpClient(options: OAuthHttpOptions): OAuthHttpClient {
  const { timeoutMs, logger, hints, onResponse } = options;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new RangeError("timeoutMs must be a positive number");
  }
  const fetchImpl = options.fetch ?? globalThis.fetch;

  async function send(url: URL, init: RequestInit): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set("Accept", "application/json");
    try {
      const response = await fetchImpl(url.href, {
        ...init,
        headers,
        // A redirect would re-send the form (or drop the bearer header); treat it as an error.
        redirect: "manual",
        signal: AbortSignal.timeout(timeoutMs),
      });
      onResponse?.(url, response.status);
      return response;
    } catch (error) {
      const failure = transportError(error);
      onResponse?.(url, failure.code === "timeout" ? "timeout" : "network");
      throw failure;
    }
  }

  function postForm(url: URL, fields: Record<string, string>): Promise<Response> {
    return send(url, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8" },
      body: new URLSearchParams(fields),
    });
  }

  async function call<T>(operation: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      const failure = error instanceof UpstreamError
        ? error
        : new UpstreamError("transient", "unexpected", "upstream call failed unexpectedly");
      const hint = hintFor(failure, hints);
      if (hint !== undefined) {
        logger?.warn("upstream refused our application", {
          operation,
          status: failure.status,
          code: failure.code,
          hint,
        });
      } else if (failure.failure === "transient") {
        logger?.warn("upstream call failed", {
          operation,
          code: failure.code,
          reason: failure.message,
        });
      }
      throw failure;
    }
  }

  return { send, postForm, call };
}

/** What to check when `failure` says the provider does not know our application as configured. */
function hintFor(
  failure: UpstreamError,
  hints: MisconfigurationHints | undefined,
): string | undefined {
  if (!hints) return undefined;
  if (failure.code === "invalid_client" || failure.code === "unauthorized_client") {
    return `the provider does not accept the application: check ${hints.client}`;
  }
  if (failure.code === "invalid_scope") {
    return `the provider refuses the scopes: check ${hints.scopes}`;
  }
  if (failure.code === "http_404") return `no such endpoint at the provider: check ${hints.url}`;
  return undefined;
}

/** Resolves a path below a base URL, keeping a sub-path the provider is served under. */
export function endpointBelow(baseUrl: URL, path: string): URL {
  const base = new URL(baseUrl.href);
  base.search = "";
  base.hash = "";
  if (!base.pathname.endsWith("/")) base.pathname += "/";
  return new URL(path.replace(/^\/+/, ""), base);
}

/**
 * The authorization URL of a redirect sign-in (RFC 6749 §4.1.1 with RFC 7636 S256):
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
    deviceCode: requireVsChars(json.device_code, "device authorization"),
    userCode: requireVsChars(json.user_code, "device authorization"),
    verificationUri: requireHttpUrl(json.verification_uri, "device authorization"),
    ...(verificationUriComplete === undefined ? {} : {
      verificationUriComplete: requireHttpUrl(verificationUriComplete, "device authorization"),
    }),
    // Whole seconds within sane bounds: a flow kept for centuries, or never polled, is no flow.
    expiresInSeconds: Math.min(
      Math.max(1, Math.floor(requirePositiveNumber(json.expires_in, "device authorization"))),
      MAX_DEVICE_FLOW_SECONDS,
    ),
    intervalSeconds: interval === undefined ? DEFAULT_INTERVAL_SECONDS : Math.min(
      Math.ceil(requireNonNegativeNumber(interval, "device authorization")),
      MAX_POLL_INTERVAL_SECONDS,
    ),
  };
}

/**
 * Classifies a device access token response (RFC 8628 §3.5) as token, pending or slow_down, or
 * throws UpstreamError; consumes the body.
 */
export async function processDeviceTokenResponse(
  response: Response,
  quirks: OAuthQuirks = {},
): Promise<DevicePollResult> {
  const body = await readBody(response);
  const backoff = backoffOf(response);
  if (response.status === 429) return { kind: "rate_limited", backoff: backoff ?? {} };
  const withBackoff = backoff ? { backoff } : {};
  const status = statusOf(response.status, body, quirks);
  if (status === 200) return { kind: "token", tokens: parseTokens(body), ...withBackoff };
  const code = oauthErrorCode(status, body);
  if (code === "authorization_pending") return { kind: "pending", ...withBackoff };
  if (code === "slow_down") return { kind: "slow_down", ...withBackoff };
  throw oauthFailure(status, body);
}

/** A token endpoint's answer (RFC 6749 §5.1/§5.2): tokens, or UpstreamError; consumes the body. */
export async function processTokenResponse(
  response: Response,
  quirks: OAuthQuirks = {},
): Promise<UpstreamTokens> {
  const body = await readBody(response);
  const status = statusOf(response.status, body, quirks);
  if (status === 200) return parseTokens(body);
  throw oauthFailure(status, body);
}

/** Checks a revocation response (RFC 7009 §2.2: 200 whether or not the token was known). */
export async function processRevocationResponse(response: Response): Promise<void> {
  const body = await readBody(response);
  if (response.status !== 200) throw oauthFailure(response.status, body);
}

/**
 * The status the answer would have had by the letter: 400 for a 200 carrying an OAuth `error`
 * from a provider known to answer its errors so.
 */
function statusOf(status: number, body: string, quirks: OAuthQuirks): number {
  if (status !== 200 || !quirks.errorsWithStatus200) return status;
  const json = parseJson(body);
  return isObject(json) && typeof json.error === "string" ? 400 : status;
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
export function oauthFailure(status: number, body: string): UpstreamError {
  const code = oauthErrorCode(status, body);
  if (code === undefined) return httpFailure(status);
  // The message is the bare code: the service reports it and classifies it by its words.
  if (isTerminalCode(code)) return new UpstreamError("terminal", code, code, status);
  return new UpstreamError(
    "transient",
    code,
    `upstream answered HTTP ${status} with an unrecognized OAuth error`,
    status,
  );
}

/** The error for a non-success answer without a usable OAuth error code. */
export function httpFailure(status: number): UpstreamError {
  if (status === 429) {
    return new UpstreamError("transient", "http_429", "upstream is rate limiting (HTTP 429)", 429);
  }
  return new UpstreamError(
    "transient",
    `http_${status}`,
    `upstream answered HTTP ${status}`,
    status,
  );
}

function requireHttpUrl(value: unknown, what: string): string {
  const text = requireVsChars(value, what);
  // The page links to it: anything but http(s) (say, `javascript:`) is refused.
  if (!parseWebUrl(text)) throw malformed(what);
  return text;
}
