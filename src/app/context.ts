/** The dependencies a request handler works with, and what each request knows of itself. */

import type { ServedSet } from "../servers/served_set.ts";
import type { McpClient } from "../gateway/mcp_client/types.ts";
import type { ClientMetadataFetcher } from "../client_metadata/fetcher.ts";
import type { Clock } from "../clock.ts";
import type { Config } from "./config.ts";
import type { TokenSigner } from "../jwt.ts";
import type { Logger } from "../logger.ts";
import type { RequestContext as HttpRequestContext } from "../http/request_context.ts";
import type { Metrics } from "../metrics/catalog.ts";
import type { VerifiedTokens } from "../gateway/verified_tokens.ts";
import type { OpenStreams } from "../gateway/open_streams.ts";
import type { EventIds } from "../gateway/event_ids.ts";
import type { ConsentSigner } from "../sign_in/consent_signer.ts";
import type { Store } from "../store/mod.ts";
import type { Templates } from "../pages/mod.ts";
import type { Upstream, UpstreamProfile } from "../upstream/types.ts";
import type { CallPolicyHolder } from "../access/call_policy_file.ts";
import type { MachineAccessHolder } from "../machine/holder.ts";
import type { GitLabKeys } from "../machine/gitlab_keys.ts";
import type { ServedGrants } from "../grants/registry.ts";
import type { GrantTypes } from "../clients/registration.ts";

/** What exists only when the OAuth settings are configured (spec §1.7). */
export interface OAuthDeps {
  upstream: Upstream;
  signer: TokenSigner;
  /** Signs the remembered consents of the redirect sign-in. */
  consentSigner: ConsentSigner;
  /** Binds the event ids the gateway relays to the session they go to. */
  eventIds: EventIds;
}

/** Everything createApp needs, passed explicitly. */
export interface AppDeps {
  config: Config;
  store: Store;
  clock: Clock;
  templates: Templates;
  logger: Logger;
  /** This process's metrics (`GET /metrics`). */
  metrics: Metrics;
  /**
   * How the upstream provider presents itself, configured or not (pages and metadata name it);
   * `oauth.upstream.profile` when OAuth is configured.
   */
  upstreamProfile: UpstreamProfile;
  /** Access tokens the gateway accepted within the last second. */
  verifiedTokens: VerifiedTokens;
  /** The gateway's open event streams, ended when their session or token ends. */
  openStreams: OpenStreams;
  /** Fetches Client ID Metadata Documents (with the SSRF guard unless configured off). */
  clientMetadataFetcher: ClientMetadataFetcher;
  /** Absent when GITLAB_CLIENT_ID or JWT_SECRET is missing. */
  oauth?: OAuthDeps;
  /** MCP_POLICY_FILE's policy in force (reloaded on SIGHUP); holds none when it is unset. */
  callPolicy: CallPolicyHolder;
  /**
   * The MCP servers the gateway serves now (`/mcp`'s and MCP_SERVERS_FILE's), with their
   * clients; a reload of MCP_SERVERS_FILE replaces the named ones.
   */
  servers: ServedSet<McpClient>;
  /** MACHINE_ACCESS_FILE's rules in force (reloaded on SIGHUP); holds none when it is unset. */
  machineAccess: MachineAccessHolder;
  /** GitLab's ID-token signing keys, cached (the jwt-bearer grant of CI jobs). */
  gitlabKeys: GitLabKeys;
  /** The grant types `POST /token` serves under the configuration, by `grant_type`. */
  grants: ServedGrants;
  /** Every grant type the service knows and the defaults of a registration naming none. */
  grantTypes: GrantTypes;
}

/** One request as a route sees it, with the whole service as its dependencies. */
export type RequestContext = HttpRequestContext<AppDeps>;

/** A request to a route that needs OAuth configuration: its dependencies are never missing. */
export interface OAuthRequestContext extends RequestContext {
  oauth: OAuthDeps;
}
