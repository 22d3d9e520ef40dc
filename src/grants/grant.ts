/**
 * What a grant type is to `POST /token`: a module that turns the request's parameters into
 * issued tokens. The token endpoint reads the form, authenticates the client and hands the
 * request to the grant the registry (`registry.ts`) names for its `grant_type`.
 *
 * @see RFC 6749 §4 and §5.1
 */

import type { MachineGrant } from "../machine/rules.ts";
import type { AccessPolicy } from "../access/policy.ts";
import type { AccessRules } from "../access/rules.ts";
import type { AuthenticatedClient } from "./client_auth/authenticate.ts";
import type { Clock } from "../clock.ts";
import type { ClientsConfig } from "../clients/config.ts";
import type { ServersConfig } from "../servers/config.ts";
import type { RecheckDeps } from "../session/access_recheck.ts";
import type { IssueDeps, ReplayDeps } from "../session/life.ts";
import type { UpstreamConfig } from "../upstream/config.ts";
import type { TokenSigner } from "../jwt.ts";
import type { LogFields } from "../logger.ts";
import type { Metrics } from "../metrics/catalog.ts";
import type { EndDeps } from "../session/end.ts";
import type { Upstream } from "../upstream/types.ts";
import type { DeviceAuthorizationConfig } from "../sign_in/device_authorization/config.ts";
import type { GitLabKeys } from "../machine/gitlab_keys.ts";
import type { MachineConfig } from "../machine/config.ts";
import type { MachineAccessHolder } from "../machine/holder.ts";

/** The settings that switch grants on and off (`Grant.enabled`). */
export type GrantSwitches =
  & Pick<DeviceAuthorizationConfig, "deviceAuthorization">
  /** MACHINE_ACCESS_FILE: the machine callers' grants are served while it is set. */
  & { machineAccessFile?: unknown };

/**
 * Whom an access token speaks for: a user's session (signed in through the provider), or a
 * client acting for itself (grants that issue to machines).
 */
export type Subject =
  | { kind: "user"; sessionId: string; clientId: string }
  | { kind: "client"; clientId: string };

/** The service's parts a grant may use. */
export interface GrantDeps extends EndDeps {
  clock: Clock;
  config:
    & IssueDeps["config"]
    & ReplayDeps["config"]
    & RecheckDeps["config"]
    & Pick<ClientsConfig, "redirectUriPolicy">
    & Pick<UpstreamConfig, "upstreamTimeoutMs">
    & Pick<ServersConfig, "mcpResourceUrl">
    & GrantSwitches
    & Pick<MachineConfig, "gitlabIssuer">
    & { revokeOnCodeReplay: boolean; upstream: { url: URL } };
  metrics: Pick<Metrics, "refreshReplays" | "deviceAuthorizations">;
  signer: Pick<TokenSigner, "sign">;
  /** The provider: refreshes and re-checks the user's access. */
  upstream: Upstream;
  /** Who may sign in as the lists in force say it (re-checked at a refresh when due). */
  accessRules(): AccessRules;
  /** The protected resources served now for an issuer (`/mcp`'s first). */
  servedResources(issuer: string): readonly string[];
  /** The lists of the MCP server `resource` names (MCP_SERVERS_FILE), if it has any. */
  serverLists(resource: string | undefined, issuer: string): AccessPolicy | undefined;
  /** MACHINE_ACCESS_FILE's rule in force for a machine client, if any. */
  machineClientRule(clientId: string): MachineGrant | undefined;
  /** MACHINE_ACCESS_FILE's rules in force. */
  machineAccess: MachineAccessHolder;
  /** GitLab's ID-token keys, cached. */
  gitlabKeys: GitLabKeys;
}

/** One token request as a grant sees it. */
export interface GrantRequest {
  /** The form's parameters (each at most once). */
  params: ReadonlyMap<string, string>;
  /** The client, as `client_auth/authenticate.ts` identified it. */
  client: AuthenticatedClient;
  /** The issuer (the service's base URL, without a trailing slash). */
  issuer: string;
  /** Correlates the grant's log lines with the request's. */
  requestId: string;
}

/** What a grant issued: the token response's body, whom it speaks for, what to log. */
export interface Issued {
  body: object;
  subject: Subject;
  /** Added to the request's one log line (never a secret in clear). */
  logFields: LogFields;
}

/** A grant type of the token endpoint. */
export interface Grant {
  /** The `grant_type` value (RFC 6749 §4, or an extension's URI). */
  readonly type: string;
  /**
   * Whether a client registering itself (RFC 7591) may list it in `grant_types`: `true` (and a
   * registration that names none gets it), `"on request"` (only when named), or `false`.
   */
  readonly registrable: boolean | "on request";
  /** Whether the configuration serves it (absent: always); off, it is as if unknown. */
  enabled?(config: GrantSwitches): boolean;
  /** Checks the request in the order its specification gives, and issues; throws OAuthError. */
  issue(deps: GrantDeps, request: GrantRequest): Promise<Issued>;
}
