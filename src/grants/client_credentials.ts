/**
 * The client credentials grant (RFC 6749 §4.4): an operator-registered machine client, having
 * proved who it is (`client_auth/authenticate.ts`), gets an access token that speaks for itself:
 * `sub` = `client:<client_id>`, no refresh token, no person and no session behind it. What it
 * may reach is its rule in MACHINE_ACCESS_FILE's `clients:`; without one it gets nothing.
 * Served only while MACHINE_ACCESS_FILE is set.
 *
 * @see docs/mcp-clients.md "Machine clients: client credentials", docs/gateway.md "Machine callers"
 */

import { OAuthError } from "../http/errors.ts";
import { machineSubject } from "../jwt.ts";
import { CLIENT_ADDED_CLAIM, grantedScope, issueMachineToken } from "../machine/token.ts";
import type { Grant, GrantDeps, GrantRequest, GrantSwitches, Issued } from "./grant.ts";
import { invalidClient } from "./client_auth/invalid_client.ts";

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
    throw invalidClient("The client_credentials grant needs client authentication");
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
  const subject = machineSubject("client", clientId);
  const body = await issueMachineToken(deps, {
    subject,
    clientId,
    issuer: request.issuer,
    requestedResource: request.params.get("resource"),
    grant: rule,
    scope: grantedScope(request.params.get("scope")),
    // No GitLab user stands behind it: `gitlab_user` is its subject (no username has a colon).
    claims: { gitlab_user: subject, [CLIENT_ADDED_CLAIM]: String(client.machine.createdAt) },
  });
  return {
    body,
    subject: { kind: "client", clientId },
    logFields: { caller: "client", authMethod: client.method },
  };
}
