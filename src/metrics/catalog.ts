/**
 * Every metric the service exposes at `GET /metrics` (issue 23 §3) as the wings see it: the
 * `Metrics` interface, its labels and the values each label takes. Call sites record with one
 * line (`deps.metrics.x.inc({...})`); every label here has a bounded set of values: route keys,
 * status codes, our own outcome words, and names from outside (gateway methods and tools) kept to
 * the first ones seen. The top floor builds it (src/app/metrics.ts) from the registry
 * (src/metrics_registry.ts) and this folder's parts, so a request's counting runs in neither.
 *
 * Counters count in this process: with several processes Prometheus scrapes each and `sum()`
 * adds them; under `deno serve --parallel` a scrape adds the other workers' counts (workers.ts).
 * `sessions_alive` is read from the shared store, so every process reports the same number
 * (`max()` it).
 */

import type { OAuthError } from "../http/errors.ts";
import type { Counter, Histogram } from "../metrics_registry.ts";
import { MCP_METHODS } from "./mcp_methods.ts";

/**
 * How many distinct tool names get a label value of their own: only names an MCP server's
 * `tools/list` answer or a policy rule gave, never what a caller sends.
 */
export const MAX_TOOL_LABELS = 100;

/** The route label of a request no route serves (404, or a Host header refused first). */
export const UNKNOWN_ROUTE = "unknown";
/** The route label of the gateway's MCP path. */
export const MCP_ROUTE = "mcp";
/** The method label of a gateway request whose JSON-RPC message is not read (yet). */
export const UNPARSED_METHOD = "unparsed";
/**
 * The server label of the gateway at `/mcp` (MCP_UPSTREAM_URL). Every other server label is a
 * name from MCP_SERVERS_FILE: a request reaches the gateway only at a configured server's path,
 * so the values stay bounded by the configuration.
 */
export const DEFAULT_SERVER_LABEL = "default";
/** The tool label of a gateway message that calls no tool. */
export const NO_TOOL = "none";

export const SIGN_IN_MODES = ["device", "redirect"] as const;
export type SignInMode = (typeof SIGN_IN_MODES)[number];
/**
 * How a sign-in ended: `completed` (session and code stored), `denied` (the user said no, on our
 * consent page or upstream), `failed` (the upstream failed it), `expired` (the device code ran
 * out), `refused` (the user is not on the sign-in allow-list, issue 23 §1).
 */
export const SIGN_IN_OUTCOMES = ["completed", "denied", "failed", "expired", "refused"] as const;
export type SignInOutcome = (typeof SIGN_IN_OUTCOMES)[number];
/** `issued`, or the OAuth error code the token endpoint answered. */
export type GrantOutcome = "issued" | OAuthError["code"];
/** A served `grant_type` (src/grants/registry.ts, whose list docs/ names too), or `other`. */
export type GrantTypeLabel = string;
/** The grant label of a `grant_type` the service does not serve. */
export const OTHER_GRANT_TYPE = "other";
/** What the token endpoint answers: `issued`, or one of its error codes. */
export const GRANT_OUTCOMES = [
  "issued",
  "invalid_request",
  "invalid_client",
  "invalid_grant",
  "unsupported_grant_type",
  "invalid_target",
  "unauthorized_client",
  "invalid_scope",
  "server_error",
  "temporarily_unavailable",
  "authorization_pending",
  "slow_down",
  "access_denied",
  "expired_token",
] as const satisfies readonly GrantOutcome[];
/** What became of a device authorization (RFC 8628): each counted once. */
export const DEVICE_AUTHORIZATION_OUTCOMES = ["started", "approved", "denied", "expired"] as const;
export type DeviceAuthorizationOutcome = (typeof DEVICE_AUTHORIZATION_OUTCOMES)[number];
/**
 * A rotated refresh token presented again: answered from the grace window (`grace`), its session
 * ended (`session_ended`, REVOKE_ON_REFRESH_REPLAY) or only refused (`refused`).
 */
export const REFRESH_REPLAY_OUTCOMES = ["grace", "session_ended", "refused"] as const;
export type RefreshReplayOutcome = (typeof REFRESH_REPLAY_OUTCOMES)[number];
/**
 * What `POST /revoke` did (ended a session, or found none for the token), and `operator`: the
 * sessions the operator's CLI ended, counted in the store by the CLI's process.
 */
export const REVOCATION_OUTCOMES = ["session_ended", "no_session", "operator"] as const;
export type RevocationOutcome = (typeof REVOCATION_OUTCOMES)[number];
/**
 * A gateway message: forwarded (`allowed`), refused by the gateway's policy (`denied`), or
 * forwarded but the MCP server could not be reached, timed out, or its answer could not be
 * relayed (`upstream_error`).
 */
export const GATEWAY_OUTCOMES = ["allowed", "denied", "upstream_error"] as const;
export type GatewayOutcome = (typeof GATEWAY_OUTCOMES)[number];
/** Why an HTTP call has no status. */
export const CALL_FAILURES = ["timeout", "network"] as const;
/** An HTTP call's status, or why it has none. */
export type CallResult = number | (typeof CALL_FAILURES)[number];
/**
 * The GitLab endpoints the service calls: `membership` is a group member lookup (its 404 means
 * "not a member"), `other` a URL none of the others (none today).
 */
export const GITLAB_ENDPOINTS = [
  "device_authorization",
  "token",
  "user",
  "revoke",
  "membership",
  "other",
] as const;
export type GitLabEndpoint = (typeof GITLAB_ENDPOINTS)[number];
/** The rate-limit buckets (`RateLimitBucket`). */
export const RATE_LIMIT_BUCKETS = [
  "authorize",
  "poll",
  "token",
  "register",
  "introspect",
  "mcp",
  "device",
] as const;
export type BucketLabel = (typeof RATE_LIMIT_BUCKETS)[number];

/**
 * Every label value the service itself chooses, by metric (without the prefix) and label: all
 * values of the labels enumerated above, and the words that stand beside values from outside
 * (route paths, methods, tools, statuses). docs/operating.md "Metrics" names each one, and
 * tests/metrics_test.ts compares the two.
 */
export const LABEL_WORDS: Readonly<Record<string, Readonly<Record<string, readonly string[]>>>> = {
  http_requests_total: { route: [MCP_ROUTE, UNKNOWN_ROUTE] },
  http_request_duration_seconds: { route: [MCP_ROUTE, UNKNOWN_ROUTE] },
  sign_ins_started_total: { mode: SIGN_IN_MODES },
  sign_ins_finished_total: { mode: SIGN_IN_MODES, outcome: SIGN_IN_OUTCOMES },
  token_grants_total: { grant_type: [OTHER_GRANT_TYPE], outcome: GRANT_OUTCOMES },
  refresh_replays_total: { outcome: REFRESH_REPLAY_OUTCOMES },
  device_authorizations_total: { outcome: DEVICE_AUTHORIZATION_OUTCOMES },
  revocations_total: { outcome: REVOCATION_OUTCOMES },
  gateway_messages_total: {
    server: [DEFAULT_SERVER_LABEL],
    method: [UNPARSED_METHOD, "other", ...MCP_METHODS],
    outcome: GATEWAY_OUTCOMES,
    tool: [NO_TOOL, "other"],
  },
  gateway_upstream_responses_total: { server: [DEFAULT_SERVER_LABEL], status: CALL_FAILURES },
  gitlab_requests_total: { endpoint: GITLAB_ENDPOINTS, status: CALL_FAILURES },
  rate_limit_refusals_total: { bucket: RATE_LIMIT_BUCKETS },
};

/** The gateway's messages, with method and tool names bounded. */
export interface GatewayMessages {
  inc(labels: { server: string; method: string; outcome: GatewayOutcome; tool: string }): void;
  /** A tool name an MCP server listed or a policy rule named: it gets a label of its own. */
  learnTool(name: string): void;
}

/** The service's metrics. */
export interface Metrics {
  /** One finished request: its route label, status and duration in milliseconds. */
  observeRequest(route: string, status: number, ms: number): void;
  requests: Counter<{ route: string; status: string }>;
  requestDuration: Histogram<{ route: string }>;
  signInsStarted: Counter<{ mode: SignInMode }>;
  signInsFinished: Counter<{ mode: SignInMode; outcome: SignInOutcome }>;
  tokenGrants: Counter<{ grant_type: GrantTypeLabel; outcome: GrantOutcome }>;
  /**
   * Runs one token grant and counts its outcome: `issued`, or the error it threw.
   * `servedGrantType` is the grant that runs, undefined for one the service does not serve.
   */
  countGrant(servedGrantType: string | undefined, run: () => Promise<Response>): Promise<Response>;
  refreshReplays: Counter<{ outcome: RefreshReplayOutcome }>;
  /** Device authorizations started, approved, denied, expired (RFC 8628). */
  deviceAuthorizations: Counter<{ outcome: DeviceAuthorizationOutcome }>;
  revocations: Counter<{ outcome: RevocationOutcome }>;
  gatewayMessages: GatewayMessages;
  /** The MCP server's answers to forwarded requests, by status (or timeout, network). */
  mcpUpstreamResponses: Counter<{ server: string; status: string }>;
  /** One call to GitLab: which endpoint, and its status (or timeout, network). */
  observeGitLabCall(endpoint: GitLabEndpoint, result: CallResult): void;
  gitlabRequests: Counter<{ endpoint: GitLabEndpoint; status: string }>;
  rateLimitRefusals: Counter<{ bucket: BucketLabel }>;
  /** One KV commit's duration in milliseconds. */
  observeStoreCommit(ms: number): void;
  storeCommitDuration: Histogram<Record<never, string>>;
  /** The exposition text. */
  render(): Promise<string>;
}
