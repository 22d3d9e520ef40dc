/**
 * OAuth error codes this service answers with, and the one error type routes throw.
 *
 * @see RFC 6749 §5.2, spec §2.7 and §7
 */

/** The OAuth error codes we use. */
export type OAuthErrorCode =
  | "invalid_request"
  | "invalid_grant"
  | "invalid_client"
  | "unsupported_grant_type"
  | "unsupported_response_type"
  | "server_error"
  | "temporarily_unavailable"
  | "invalid_redirect_uri"
  | "invalid_client_metadata"
  | "invalid_token"
  | "insufficient_scope"
  /** A `resource` (RFC 8707 §2) other than the protected MCP server. */
  | "invalid_target"
  /** The MCP server behind the gateway could not be reached (502) or did not answer (504). */
  | "bad_gateway"
  | "gateway_timeout"
  /** RFC 6749 §5.2: a client not allowed this grant; §4.1.2.1: a scope not served. */
  | "unauthorized_client"
  | "invalid_scope"
  /** The device grant's answers while the user has not approved (RFC 8628 §3.5). */
  | "authorization_pending"
  | "slow_down"
  | "access_denied"
  | "expired_token"
  /** RFC 7009 §2.2.1: `/revoke` cannot revoke this kind of token. */
  | "unsupported_token_type";

/** The one error type: routes throw it; `errorResponse` renders it as `{error, error_description}`. */
export class OAuthError extends Error {
  constructor(
    readonly status: number,
    readonly code: OAuthErrorCode,
    readonly description: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(`${code}: ${description}`);
    this.name = "OAuthError";
  }

  /** The same error answered with more headers (`Retry-After`, ...). */
  withHeaders(headers: Record<string, string>): OAuthError {
    return new OAuthError(this.status, this.code, this.description, {
      ...this.headers,
      ...headers,
    });
  }

  /** The JSON body it is answered with (spec §2.7). */
  body(): Record<string, string> {
    return { error: this.code, error_description: errorDescription(this.description) };
  }
}

/**
 * `text` as an `error_description` may carry it (RFC 6749 §5.2, §4.1.2.1; RFC 6750 §3): printable
 * ASCII without `"` and `\`. A description quoting what a client or a CI job sent (a scope, a
 * branch name) keeps its words, the rest becomes `?` (`"` becomes `'`, `\` becomes `/`).
 */
export function errorDescription(text: string): string {
  return text.replace(/[^\x20-\x7E]|["\\]/g, (c) => c === '"' ? "'" : c === "\\" ? "/" : "?");
}

/** The description spec §7 fixes for a service without OAuth configuration. */
export const NOT_CONFIGURED = "OAuth not configured";

/** The 500 every operation answers when the upstream client id or JWT secret is missing (spec §1.7). */
export function notConfiguredError(): OAuthError {
  return new OAuthError(500, "server_error", NOT_CONFIGURED);
}

/** Seconds a client waits before trying again while the database cannot be reached. */
export const STORE_RETRY_AFTER_SECONDS = "5";

/**
 * The 503 a request that needs the store gets while its database cannot answer
 * (StoreUnavailableError): the service and the library guard answer the same.
 */
export function storeUnavailableError(): OAuthError {
  return new OAuthError(503, "temporarily_unavailable", "The service's database is unavailable", {
    "Retry-After": STORE_RETRY_AFTER_SECONDS,
  });
}

/** The 404 for a path no route serves. */
export function notFound(pathname: string): OAuthError {
  return new OAuthError(404, "invalid_request", `No endpoint at ${pathname}`);
}
