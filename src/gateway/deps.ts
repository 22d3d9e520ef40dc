/**
 * What the gateway uses of the service: each part named once here, taken by the steps that need
 * it. The app hands the whole service, which has them all.
 */

import type { CallPolicy } from "../access/call_policy.ts";
import type { AccessPolicy } from "../access/policy.ts";
import type { CallPolicyHolder } from "../access/call_policy_file.ts";
import type { AccessConfig } from "../access/config.ts";
import type { Clock } from "../clock.ts";
import type { RateLimit } from "../http/rate_limit.ts";
import type { TokenSigner } from "../jwt.ts";
import type { Logger } from "../logger.ts";
import type { MachineAccessHolder } from "../machine/holder.ts";
import type { Metrics } from "../metrics/catalog.ts";
import type { SessionConfig } from "../session/config.ts";
import type { Store } from "../store/mod.ts";
import type { UpstreamConfig } from "../upstream/config.ts";
import type { Upstream } from "../upstream/types.ts";
import type { GatewayConfig } from "./config.ts";
import type { ServersConfig } from "../servers/config.ts";
import type { Audit } from "./audit.ts";
import type { Deadlines } from "./deadlines.ts";
import type { GuardDeps } from "./guard.ts";
import type { McpClient } from "./mcp_client/types.ts";
import type { SessionRateLimit } from "./session_rate_limit.ts";
import type { TokenHeader } from "../servers/file.ts";
import type { OpenStreams } from "./open_streams.ts";
import type { EventIds } from "./event_ids.ts";
import type { VerifiedTokens } from "./verified_tokens.ts";

/** The gateway's dependencies. */
export interface GatewayDeps {
  config:
    & GatewayConfig
    & Pick<ServersConfig, "mcpUpstreamTimeoutMs">
    & Pick<AccessConfig, "access">
    & Pick<SessionConfig, "accessTokenTtlSeconds" | "sessionIdleTtlSeconds">
    & Pick<UpstreamConfig, "upstreamTimeoutMs">
    & { rateLimits: { mcp?: RateLimit } };
  store: Store;
  clock: Clock;
  logger: Logger;
  metrics: Pick<
    Metrics,
    "gatewayMessages" | "mcpUpstreamResponses" | "rateLimitRefusals"
  >;
  callPolicy: CallPolicyHolder;
  /** MACHINE_ACCESS_FILE's rules in force: machine callers' servers and tools. */
  machineAccess: MachineAccessHolder;
  verifiedTokens: VerifiedTokens;
  openStreams: OpenStreams;
}

/**
 * What exists only once OAuth is configured: the provider, the signer of our tokens, and what
 * binds event ids to sessions (keyed by the same secrets).
 */
export interface GatewayOAuth {
  upstream: Upstream;
  signer: Pick<TokenSigner, "verify">;
  eventIds: EventIds;
}

/** What every gateway request shares: where to, the guard's dependencies, the time limits. */
export interface Gateway {
  deps: GatewayDeps;
  /** The server's name (`default` for `/mcp`), for the audit line. */
  server: string;
  upstreamUrl: URL;
  /** How the MCP server receives the user's GitLab token (or none). */
  tokenHeader: TokenHeader;
  client: McpClient;
  /** Built on the first request, from the OAuth dependencies only a configured service has. */
  guard: GuardDeps | undefined;
  /** How long the MCP server has for its response headers (its own `timeout_ms`, or the service's). */
  deadlines: Deadlines;
  audit: Audit;
  /** RATE_LIMIT_MCP; undefined when `off`. */
  rateLimit: SessionRateLimit | undefined;
  /** The server's own lists (MCP_SERVERS_FILE), narrowing the service-wide ones. */
  ownLists?: AccessPolicy;
  /** The server's own `policy_file` (MCP_SERVERS_FILE); undefined: MCP_POLICY_FILE decides. */
  ownPolicy?: CallPolicy;
  /** The policy whose literal tool names the metrics have learnt (once per policy loaded). */
  toolsLearntFrom?: CallPolicy;
  /** The MCP resource URL for a base URL (the same string for every request to one host). */
  resourceFor(baseUrl: string): string;
}
