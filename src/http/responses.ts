/** The service's own JSON responses: bodies, OAuth error bodies, and no-store headers. */

import type { OAuthError } from "./errors.ts";

/** Token and poll responses must never be cached (RFC 6749 §5.1). */
export const NO_STORE = { "Cache-Control": "no-store", "Pragma": "no-cache" } as const;

/** A JSON response. */
export function json(body: unknown, status = 200, headers: HeadersInit = {}): Response {
  return Response.json(body, { status, headers });
}

/** An OAuthError as it answers: its body (`{error, error_description}`, spec §2.7), its headers. */
export function errorResponse(error: OAuthError): Response {
  return json(error.body(), error.status, { ...NO_STORE, ...error.headers });
}
