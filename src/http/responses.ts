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

/**
 * A response with `headers` added after it is built, in order (a repeated name stays repeated).
 * Deno converts a list given in `ResponseInit.headers` through its generic WebIDL path, about a
 * microsecond a header; appending to the new response's own `Headers` costs a fifth of that, and
 * the gateway answers every call with eight. `Content-Type` replaces the one a string body brings.
 */
export function responseWithHeaders(
  body: BodyInit | null,
  init: { status: number; statusText?: string },
  headers: readonly (readonly [string, string])[],
): Response {
  const response = new Response(body, init);
  const target = response.headers;
  for (const [name, value] of headers) {
    if (name.length === 12 && name.toLowerCase() === "content-type") target.set(name, value);
    else target.append(name, value);
  }
  return response;
}
