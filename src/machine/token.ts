/**
 * A machine caller's access token: for the one MCP server its rule names and the request asks
 * for (RFC 8707; `/mcp` when it names none), `sub` `ci:<project_path>` or `client:<client_id>`,
 * a `sid` of its own (no session is stored: the gateway's rate limit and MCP session binding
 * key on it), the service's scopes, and no refresh token. Both machine grants issue through here.
 *
 * @see docs/gateway.md "Machine callers"
 */

import type { Clock } from "../clock.ts";
import { randomToken } from "../crypto.ts";
import { OAuthError } from "../http/errors.ts";
import { invalidTarget, requireServedResource } from "../http/resource.ts";
import type { AccessTokenClaims, TokenSigner } from "../jwt.ts";
import { GRANTED_SCOPES } from "../scopes.ts";
import type { SessionConfig } from "../session/config.ts";
import { DEFAULT_SERVER } from "../servers/file.ts";
import type { MachineGrant } from "./rules.ts";

/**
 * The claim of a client's token naming when its client was added (`admin clients add`, epoch
 * ms, as text): the gateway refuses the token once the client was deleted, also when a client was
 * added again under the same id since.
 */
export const CLIENT_ADDED_CLAIM = "client_added";

/** What issuing a machine token uses. */
export interface MachineTokenDeps {
  signer: Pick<TokenSigner, "sign">;
  clock: Clock;
  config: Pick<SessionConfig, "accessTokenTtlSeconds" | "accessTokenAudience">;
  /** The resources served now for an issuer: `/mcp`'s first, then `/mcp/<name>` of each. */
  servedResources(issuer: string): readonly string[];
}

/** What a machine token is issued for. */
export interface MachineTokenRequest {
  /** `ci:<project_path>` or `client:<client_id>` (caller.ts's machineSubject). */
  subject: string;
  /** The OAuth client (a registered client's id; a CI job's subject). */
  clientId: string;
  issuer: string;
  /** The resource the request named, if it named one. */
  requestedResource?: string;
  grant: MachineGrant;
  /** At most this long (a CI job's ID token's remaining life); ACCESS_TOKEN_TTL otherwise. */
  maxTtlSeconds?: number;
  /** The scopes granted, space-separated; all the service's scopes when absent. */
  scope?: string;
  /** More claims (a CI job's `ci_*`); `gitlab_user` when a person is behind the caller. */
  claims?: Record<string, string | undefined>;
}

/** The token response of a machine grant (RFC 6749 §5.1; no refresh token). */
export interface MachineTokenBody {
  access_token: string;
  token_type: "Bearer";
  expires_in: number;
  scope: string;
}

/**
 * The served resource the request names and the rule admits: 400 `invalid_target` when it is
 * not served, or not one of the rule's servers (no `resource`: /mcp, `default`).
 */
export function machineResource(
  served: readonly string[],
  requested: string | undefined,
  grant: MachineGrant,
): string {
  const resource = requireServedResource(requested, served);
  const server = served.indexOf(resource) === 0
    ? DEFAULT_SERVER
    : resource.slice(resource.lastIndexOf("/") + 1);
  if (!grant.servers.includes(server)) {
    throw invalidTarget(
      requested === undefined
        ? "the rule does not admit this caller at /mcp (server default); name a resource"
        : "resource is not one of the MCP servers the rule admits this caller at",
    );
  }
  return resource;
}

/** Signs the access token and builds the response's body. */
export async function issueMachineToken(
  deps: MachineTokenDeps,
  request: MachineTokenRequest,
): Promise<MachineTokenBody> {
  const { config } = deps;
  const resource = machineResource(
    deps.servedResources(request.issuer),
    request.requestedResource,
    request.grant,
  );
  const ttl = Math.max(
    1,
    Math.min(config.accessTokenTtlSeconds, request.maxTtlSeconds ?? Infinity),
  );
  const scope = request.scope ?? GRANTED_SCOPES.join(" ");
  const claims: AccessTokenClaims & Record<string, unknown> = {
    ...definedOnly(request.claims ?? {}),
    iss: request.issuer,
    sub: request.subject,
    aud: config.accessTokenAudience === "resource" ? resource : request.clientId,
    sid: `m_${randomToken(16)}`,
    scope,
    gitlab_user: request.claims?.gitlab_user ?? "",
    resource,
    client_id: request.clientId,
  };
  const accessToken = await deps.signer.sign(claims, deps.clock.now(), Math.floor(ttl));
  return {
    access_token: accessToken,
    token_type: "Bearer",
    expires_in: Math.floor(ttl),
    scope,
  };
}

function definedOnly(claims: Record<string, string | undefined>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(claims).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
}

/**
 * The scopes granted: those asked for (each one this service grants), or all of them; an
 * unknown scope is refused (RFC 6749 §5.2 `invalid_scope`).
 */
export function grantedScope(requested: string | undefined): string {
  if (requested === undefined || requested.trim() === "") return GRANTED_SCOPES.join(" ");
  const asked = requested.split(" ").filter((scope) => scope !== "");
  const unknown = asked.find((scope) => !(GRANTED_SCOPES as readonly string[]).includes(scope));
  if (unknown !== undefined) {
    throw new OAuthError(400, "invalid_scope", `Unknown scope ${unknown.slice(0, 64)}`);
  }
  return [...new Set(asked)].join(" ");
}
