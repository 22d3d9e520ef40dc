/**
 * Checks the grants that continue a user's session share: the client asking is the one the
 * session was issued to, the resource asked for is the session's, and how a session ends when a
 * grant finds it must.
 *
 * @see RFC 6749 §4.1.3 and §6, RFC 8707 §2.2
 */

import { isClientMetadataUrl } from "../client_metadata/client_id.ts";
import { OAuthError } from "../http/errors.ts";
import {
  invalidTarget,
  mcpResourceUrl,
  namedServerResource,
  requireServedResource,
  sameResource,
} from "../http/resource.ts";
import { redact } from "../logger.ts";
import { afterSessionEnded } from "../session/end.ts";
import { type IssuedTokens, issueTokens } from "../session/life.ts";
import type { SessionRecord } from "../store/records.ts";
import type { GrantDeps, GrantRequest, Issued } from "./grant.ts";

/** 400 `invalid_grant`. */
export function invalidGrant(description: string): OAuthError {
  return new OAuthError(400, "invalid_grant", description);
}

/**
 * Under REDIRECT_URI_POLICY=registered a public client identifies itself, and the grant must
 * have been issued to it (RFC 6749 §4.1.3). The spec's default policy checks no client id.
 */
export async function requireSameClient(
  deps: Pick<GrantDeps, "store">,
  clientId: string | undefined,
  grantClientId: string,
  grant: "code" | "refresh token" | "device code",
): Promise<void> {
  if (!clientId) throw new OAuthError(400, "invalid_request", "client_id is required");
  // A metadata document client was checked against its document at /authorize; a registered
  // client that lost its registration gets 401, which makes MCP clients register again.
  if (!isClientMetadataUrl(clientId) && !await deps.store.getClient(clientId)) {
    throw new OAuthError(401, "invalid_client", "Unknown client_id");
  }
  if (clientId !== grantClientId) {
    throw invalidGrant(`The ${grant} was issued to another client`);
  }
}

/** The protected MCP resource, for the issuer a request came to. */
export function protectedResource(deps: Pick<GrantDeps, "config">, issuer: string): string {
  return mcpResourceUrl(deps.config, issuer);
}

/**
 * RFC 8707 §2.2: a `resource` at /token must be the protected MCP server and the one the
 * session was authorized for (a session from before resource indicators is for that server).
 * Without one, the session's resource is meant: a server of this issuer's MCP_SERVERS_FILE
 * that it no longer lists gets no new tokens (the session stays, for the server's return). A
 * resource of another base URL (a session from before BASE_URL changed, or one another host
 * name started without BASE_URL) is left as it was.
 */
export function requireSessionResource(
  deps: Pick<GrantDeps, "servedResources">,
  request: GrantRequest,
  session: SessionRecord,
): void {
  const requested = request.params.get("resource");
  const served = deps.servedResources(request.issuer);
  if (requested === undefined) {
    if (!isRemovedServer(session.resource, request.issuer, served)) return;
    throw invalidTarget("the MCP server this grant was authorized for is no longer served");
  }
  requireServedResource(requested, served);
  if (session.resource !== undefined && !sameResource(requested, session.resource)) {
    throw invalidTarget("resource is not the one this grant was authorized for");
  }
}

/** Whether `resource` is a named server's of `issuer` (`{base}/mcp/<name>`) not served now. */
function isRemovedServer(
  resource: string | undefined,
  issuer: string,
  served: readonly string[],
): boolean {
  if (resource === undefined || !resource.startsWith(namedServerResource(issuer, ""))) {
    return false;
  }
  return !served.some((candidate) => sameResource(candidate, resource));
}

/**
 * New tokens for `session` to the one MCP server it is for, once the request may have them
 * there (RFC 8707: a `resource` named must be the session's).
 */
export async function issueForSession(
  deps: GrantDeps,
  request: GrantRequest,
  session: SessionRecord,
): Promise<IssuedTokens> {
  requireSessionResource(deps, request, session);
  return await issueTokens(deps, session, request.issuer, protectedResource(deps, request.issuer));
}

/** What follows a session a grant ended: its tokens and GitLab token go (best effort). */
export async function afterGrantEndedSession(
  deps: GrantDeps,
  session: SessionRecord,
  request: GrantRequest,
): Promise<void> {
  await afterSessionEnded(deps, session, { requestId: request.requestId });
}

/** What a grant continuing a user's session issued, for the response and its log line. */
export function sessionTokens(
  session: SessionRecord,
  body: { refresh_token: string },
): Issued {
  return {
    body,
    subject: { kind: "user", sessionId: session.id, clientId: session.clientId },
    logFields: { refreshToken: redact(body.refresh_token) },
  };
}
