/**
 * The client credentials grant (RFC 6749 §4.4): an operator-registered machine client, having
 * proved who it is (`clients/authentication.ts`), gets an access token that speaks for itself:
 * `sub` = `client:<client_id>`, no refresh token, no person and no session behind it. What it
 * may reach is its rule in MACHINE_ACCESS_FILE's `clients:`; without one it gets nothing.
 * Served only while MACHINE_ACCESS_FILE is set.
 *
 * @see README.md "Machine callers"
 */

import { OAuthError } from "../http/errors.ts";
import { invalidTarget, requireServedResource } from "../http/resource.ts";
import { GRANTED_SCOPES } from "../scopes.ts";
import type { Grant, GrantDeps, GrantRequest, GrantSwitches, Issued } from "./grant.ts";
import { invalidClient } from "../clients/methods/invalid_client.ts";

/** The grant's `grant_type`. */
export const CLIENT_CREDENTIALS_GRANT_TYPE = "client_credentials";

/** The grant's module. */
export const CLIENT_CREDENTIALS_GRANT: Grant = {
  type: CLIENT_CREDENTIALS_GRANT_TYPE,
  // Machine clients are the operator's (`admin clients add`); registration refuses the grant.
  registrable: false,
  enabled: machineAccessOn,
  issue: issueClientToken,
};

/** Whether MACHINE_ACCESS_FILE is set. */
function machineAccessOn(config: GrantSwitches): boolean {
  return config.machineAccessFile !== undefined;
}

async function issueClientToken(deps: GrantDeps, request: GrantRequest): Promise<Issued> {
  const { client } = request;
  if (client.machine === undefined) {
    // A public client, or a machine client that proved nothing: RFC 6749 §4.4.2 needs proof.
    throw invalidClient("The client_credentials grant needs client authentication", {
      basic: true,
    });
  }
  const clientId = client.machine.clientId;
  const rule = deps.machineClientRule(clientId);
  if (rule === undefined) {
    throw new OAuthError(
      400,
      "unauthorized_client",
      "No rule of the machine access file admits this client",
    );
  }
  const scope = grantedScope(request.params.get("scope"));
  const resource = ruleResource(deps, request, rule.servers);
  const now = deps.clock.now();
  const ttl = deps.config.accessTokenTtlSeconds;
  const subject = `client:${clientId}`;
  const accessToken = await deps.signer.sign(
    {
      iss: request.issuer,
      sub: subject,
      aud: deps.config.accessTokenAudience === "resource" ? resource : clientId,
      // No session stands behind it: `sid` is the token's own id, `gitlab_user` its subject
      // (no GitLab username has a colon), so resource servers reading the claims find both.
      sid: crypto.randomUUID(),
      gitlab_user: subject,
      scope,
      resource,
      client_id: clientId,
    },
    now,
    ttl,
  );
  return {
    body: { access_token: accessToken, token_type: "Bearer", expires_in: ttl, scope },
    subject: { kind: "client", clientId },
    logFields: { caller: "client", authMethod: client.method },
  };
}

/**
 * The scopes granted: those asked for (each one this service grants), or all of them; an
 * unknown scope is refused (RFC 6749 §5.2 `invalid_scope`).
 */
function grantedScope(requested: string | undefined): string {
  if (requested === undefined || requested.trim() === "") return GRANTED_SCOPES.join(" ");
  const asked = requested.split(" ").filter((scope) => scope !== "");
  const unknown = asked.find((scope) => !(GRANTED_SCOPES as readonly string[]).includes(scope));
  if (unknown !== undefined) {
    throw new OAuthError(400, "invalid_scope", `Unknown scope ${unknown.slice(0, 64)}`);
  }
  return [...new Set(asked)].join(" ");
}

/**
 * The MCP server the token is for: the one `resource` names (without it, `/mcp`), which must be
 * one of the rule's servers (`default` is `/mcp`) else 400 `invalid_target`.
 */
function ruleResource(deps: GrantDeps, request: GrantRequest, servers: readonly string[]): string {
  const served = deps.servedResources(request.issuer);
  const resource = requireServedResource(request.params.get("resource"), served);
  // `/mcp`'s resource first, then each named server's at `/mcp/<name>`.
  const name = served.indexOf(resource) === 0
    ? "default"
    : resource.slice(resource.lastIndexOf("/") + 1);
  if (!servers.includes(name)) {
    throw invalidTarget(
      name === "default"
        ? "This client's rule does not include the MCP server at /mcp; name a resource"
        : `This client's rule does not include the MCP server ${name}`,
    );
  }
  return resource;
}
