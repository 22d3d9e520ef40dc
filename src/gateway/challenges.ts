/**
 * Refusals of a protected resource: errors that carry the `WWW-Authenticate: Bearer` challenge
 * RFC 6750 §3 asks for, pointing at the resource's metadata (RFC 9728 §5.1), and render it
 * wherever they are answered.
 *
 * @see RFC 6750 §3, RFC 9728 §5.1, MCP authorization spec ("Access Token Usage")
 */

import { errorDescription, OAuthError } from "../http/errors.ts";
import { protectedResourceMetadataUrl } from "../http/resource.ts";
import { GRANTED_SCOPES } from "../scopes.ts";

/**
 * The scopes a 401 says the resource needs (MCP 2025-11-25 "Protected Resource Metadata
 * Discovery Requirements": a client asks for them rather than guessing): those every session is
 * granted, as the metadata's `scopes_supported` lists.
 */
const REQUIRED_SCOPE = GRANTED_SCOPES.join(" ");

/** What a challenge says beyond where the resource's metadata is. */
type ChallengeKind =
  /** No bearer token was sent: a challenge without error code (RFC 6750 §3.1). */
  | { error: "none" }
  | { error: "invalid_token" }
  | { error: "insufficient_scope"; scope: string };

/** A refusal answered with a Bearer challenge for one protected resource. */
export class BearerChallengeError extends OAuthError {
  private constructor(
    status: number,
    private readonly kind: ChallengeKind,
    description: string,
    resource: string,
  ) {
    super(
      status,
      kind.error === "insufficient_scope" ? "insufficient_scope" : "invalid_token",
      description,
      { "WWW-Authenticate": challengeHeader(kind, description, resource) },
    );
    this.name = "BearerChallengeError";
  }

  /** 401 without error code: no access token was sent. */
  static authenticationRequired(resource: string): BearerChallengeError {
    return new BearerChallengeError(
      401,
      { error: "none" },
      "Authentication required: send an access token as Bearer",
      resource,
    );
  }

  /** 401 `invalid_token`: the token is not (or no longer) acceptable here. */
  static invalidToken(resource: string, description: string): BearerChallengeError {
    return new BearerChallengeError(401, { error: "invalid_token" }, description, resource);
  }

  /** 403 `insufficient_scope`: the token lacks `scope`. */
  static insufficientScope(resource: string, scope: string): BearerChallengeError {
    return new BearerChallengeError(
      403,
      { error: "insufficient_scope", scope },
      `The access token lacks the ${scope} scope`,
      resource,
    );
  }

  /** Without a token there is no error to name, only what to do (RFC 6750 §3.1). */
  override body(): Record<string, string> {
    return this.kind.error === "none"
      ? { error_description: errorDescription(this.description) }
      : super.body();
  }
}

function challengeHeader(kind: ChallengeKind, description: string, resource: string): string {
  const resourceMetadata = protectedResourceMetadataUrl(resource);
  switch (kind.error) {
    case "none":
      return challenge({ resource_metadata: resourceMetadata, scope: REQUIRED_SCOPE });
    case "invalid_token":
      return challenge({
        error: "invalid_token",
        error_description: description,
        resource_metadata: resourceMetadata,
        scope: REQUIRED_SCOPE,
      });
    case "insufficient_scope":
      return challenge({
        error: "insufficient_scope",
        scope: kind.scope,
        error_description: description,
        resource_metadata: resourceMetadata,
      });
  }
}

/** `Bearer k="v", ...` with each value reduced to what an RFC 6750 quoted string may hold. */
function challenge(params: Record<string, string>): string {
  const quoted = Object.entries(params).map(([name, value]) =>
    `${name}="${errorDescription(value)}"`
  );
  return `Bearer ${quoted.join(", ")}`;
}
