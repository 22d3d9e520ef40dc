/** The service's own JSON responses: bodies, OAuth error bodies, and no-store headers. */

import type { OAuthError } from "./errors.ts";

/** Token and poll responses must never be cached (RFC 6749 §5.1). */
export const NO_STORE = { "Cache-Control": "no-store", "Pragma": "no-cache" } as const;

/** A JSON response. */
export function json(body: unknown, status = 200, headers: HeadersInit = {}): Response {
  const response = Response.json(body, { status, headers });
  return response;
}

/** The `{error, error_description}` body of spec §2.7 for an OAuthError. */
export function errorResponse(error: OAuthError): Response {
  return json(
    { error: error.code, error_description: error.description },
    error.status,
    { ...NO_STORE, ...error.headers },
  );
}
