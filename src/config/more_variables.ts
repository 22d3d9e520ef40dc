/**
 * The variables of the gateway (MCP_UPSTREAM_*, AUDIT_LOG) and of the abuse limits (rate
 * limits, the GitLab poll budget, pending-flow caps), kept apart from the main table in
 * variables.ts, which spreads them in.
 */

import { parsePolicyFile } from "../access/call_policy_file.ts";
import {
  caseInsensitive,
  decimalAbove,
  integerBetween,
  oneOf,
  parseBoolean,
  parseForwardHeaders,
  parseHttpUrlWithQuery,
  parseRateLimit,
} from "./parsers.ts";
import { type ConfigTable, variable } from "./variable.ts";

/** The gateway in front of an MCP server. */
export const GATEWAY_VARIABLES = {
  /** Gateway mode: where authenticated MCP requests are forwarded. Undefined: no gateway. */
  mcpUpstreamUrl: variable(
    "MCP_UPSTREAM_URL",
    undefined,
    parseHttpUrlWithQuery,
    "gateway mode: where authenticated MCP requests go",
  ),
  /** How the gateway hands the MCP server the user's GitLab token. */
  mcpUpstreamTokenHeader: variable(
    "MCP_UPSTREAM_TOKEN_HEADER",
    "authorization",
    caseInsensitive(oneOf("authorization", "private-token")),
    "gateway: `private-token` sends `PRIVATE-TOKEN` instead of a Bearer",
  ),
  /**
   * Client headers the gateway passes on beyond its own list (lower case); never a credential.
   * Undefined: none.
   */
  mcpUpstreamForwardHeaders: variable(
    "MCP_UPSTREAM_FORWARD_HEADERS",
    undefined,
    parseForwardHeaders,
    "gateway: more client headers to pass on, comma-separated ([which](#the-gateways-headers))",
  ),
  /** How long the gateway waits for the MCP server's response headers. */
  mcpUpstreamTimeoutMs: variable(
    "MCP_UPSTREAM_TIMEOUT_MS",
    "30000",
    integerBetween(1, 3_600_000),
    "gateway: time limit for the MCP server's response headers",
  ),
  /** Gateway: what each account may call; read at start-up, again on SIGHUP. Undefined: all. */
  mcpPolicyFile: variable(
    "MCP_POLICY_FILE",
    undefined,
    parsePolicyFile,
    "gateway: JSON rules of who may call what ([policy](#what-they-may-call))",
  ),
  /** The gateway's audit line per MCP message. */
  auditLog: variable(
    "AUDIT_LOG",
    "on",
    parseBoolean,
    "gateway: `off` drops the audit line written per MCP message",
  ),
} satisfies ConfigTable;

/** Rate limits, the GitLab poll budget and the caps on pending device flows. */
export const ABUSE_VARIABLES = {
  /** Per-client-IP limits; undefined when `off`. */
  rateLimits: {
    authorize: variable(
      "RATE_LIMIT_AUTHORIZE",
      "30/600",
      parseRateLimit,
      "per client IP: requests / seconds, or `off`",
    ),
    poll: variable("RATE_LIMIT_POLL", "120/60", parseRateLimit, "the same for `/oauth/poll`"),
    token: variable(
      "RATE_LIMIT_TOKEN",
      "300/600",
      parseRateLimit,
      "the same for `/token` and `/revoke`",
    ),
    register: variable(
      "RATE_LIMIT_REGISTER",
      "20/3600",
      parseRateLimit,
      "the same for `/register`",
    ),
    introspect: variable(
      "RATE_LIMIT_INTROSPECT",
      "1200/60",
      parseRateLimit,
      "per introspection caller (its token), for `/introspect`",
    ),
    mcp: variable(
      "RATE_LIMIT_MCP",
      "600/60",
      parseRateLimit,
      "gateway: MCP messages / seconds per sign-in session, loopback too ([why](#abuse-limits))",
    ),
  },
  /**
   * GitLab device-token polls per second, all instances together, shared fairly among client
   * prefixes (sign_in/poll_budget.ts). GitLab.com allows some 500 unauthenticated requests a
   * minute per IP address: 5/s is 300 of them, leaving room for flow starts.
   */
  gitlabPollBudget: variable(
    "GITLAB_POLL_BUDGET",
    "5",
    decimalAbove(0, 10_000),
    "GitLab polls per second, all instances together ([how](#poll-economy-device-mode))",
  ),
  /** Device flows pending at once, all clients together; a new one past it answers 429. */
  maxPendingFlows: variable(
    "MAX_PENDING_FLOWS",
    "1000",
    integerBetween(1, 100_000),
    "pending device sign-ins at once, in all ([abuse limits](#abuse-limits))",
  ),
  /** The same per client prefix (IPv4 /24, IPv6 /56). */
  maxPendingFlowsPerPrefix: variable(
    "MAX_PENDING_FLOWS_PER_PREFIX",
    "50",
    integerBetween(1, 100_000),
    "the same per client IPv4 /24 or IPv6 /56",
  ),
  /** `exempt`: loopback clients are never limited; `limit`: they are, like everyone. */
  rateLimitLoopback: variable(
    "RATE_LIMIT_LOOPBACK",
    "exempt",
    oneOf("exempt", "limit"),
    "`limit`: loopback clients are limited too",
  ),
} satisfies ConfigTable;
