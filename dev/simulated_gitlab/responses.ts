/** Reading requests and writing the JSON and OAuth error answers GitLab gives. */

/** Reads a form body, or a JSON object's string fields when the body is JSON. */
export async function readForm(request: Request): Promise<URLSearchParams> {
  const type = request.headers.get("Content-Type") ?? "";
  const text = await request.text();
  if (type.includes("application/json")) return jsonStringFields(text);
  return new URLSearchParams(text);
}

function jsonStringFields(text: string): URLSearchParams {
  const params = new URLSearchParams();
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value === "object" && value !== null) {
      for (const [key, field] of Object.entries(value)) {
        if (typeof field === "string") params.set(key, field);
      }
    }
  } catch {
    // An unreadable body is an empty form, as far as the simulation cares.
  }
  return params;
}

/** A JSON answer that must not be cached. */
export function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json; charset=utf-8", "Cache-Control": "no-store" },
  });
}

/** An OAuth error answer (RFC 6749 §5.2). */
export function oauthError(status: number, error: string, description: string): Response {
  return json(status, { error, error_description: description });
}

/** GitLab's `invalid_grant`, with its wording. */
export function invalidGrant(): Response {
  return oauthError(
    400,
    "invalid_grant",
    "The provided authorization grant is invalid, expired, revoked, does not match the redirection URI used in the authorization request, or was issued to another client.",
  );
}

/** GitLab's `invalid_client`, with its wording. */
export function invalidClient(): Response {
  return oauthError(
    401,
    "invalid_client",
    "Client authentication failed due to unknown client, no client authentication included, or unsupported authentication method.",
  );
}

/** GitLab's rate limit answer: plain text, HTTP 429, `Retry-After` in seconds. */
export function tooManyRequests(retryAfterSeconds: number): Response {
  return new Response("Retry later\n", {
    status: 429,
    headers: { "Content-Type": "text/plain", "Retry-After": String(retryAfterSeconds) },
  });
}
