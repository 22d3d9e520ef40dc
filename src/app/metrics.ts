/**
 * The service's metrics built (the catalog is src/metrics/catalog.ts): every family in one
 * registry of the app's own, and what a request records per request (its route, its grant, each
 * KV commit, each gateway message). It lives on the top floor, which composes the service from
 * the ground floor's registry and the metrics wing's parts (the gauge of live sessions, the
 * operator's revocations, the other workers' counts), so counting adds no folder to a request's
 * path (issue 34).
 */

import type { Clock } from "../clock.ts";
import { OAuthError, storeUnavailableError } from "../http/errors.ts";
import { StoreUnavailableError } from "../store/backend.ts";
import { BoundedLabel, NO_LABELS, Registry } from "../metrics_registry.ts";
import {
  type BucketLabel,
  DEVICE_AUTHORIZATION_OUTCOMES,
  type DeviceAuthorizationOutcome,
  type GatewayOutcome,
  type GitLabEndpoint,
  type GrantOutcome,
  type GrantTypeLabel,
  MAX_TOOL_LABELS,
  type Metrics,
  NO_TOOL,
  OTHER_GRANT_TYPE,
  RATE_LIMIT_BUCKETS,
  type RefreshReplayOutcome,
  REVOCATION_OUTCOMES,
  type RevocationOutcome,
  type SignInMode,
  type SignInOutcome,
  UNPARSED_METHOD,
} from "../metrics/catalog.ts";
import { MCP_METHODS } from "../metrics/mcp_methods.ts";
import { createOperatorRevocations } from "../metrics/operator_revocations.ts";
import { createSessionsAlive } from "../metrics/sessions_alive.ts";
import { shareCounts } from "../metrics/workers.ts";

const PREFIX = "gitlab_mcp_auth_";

/** Request latencies, in seconds: 1 ms to 10 s. */
const REQUEST_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** KV commit latencies, in seconds: 0.1 ms to 1 s. */
const COMMIT_BUCKETS = [
  0.0001,
  0.00025,
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  1,
];

/**
 * What the metrics read from the store: how many sessions are alive (at most once a minute),
 * and the sessions the operator's CLI ended (taken at a scrape, at most every few seconds).
 */
export interface MetricsSources {
  clock: Clock;
  countLiveSessions(): Promise<number>;
  takeOperatorRevocations(): Promise<number>;
  /** The other `deno serve --parallel` workers' channel: each scrape adds their counts. */
  workers?: BroadcastChannel;
}

/** The service's metrics, in a registry of their own. */
export function createMetrics(sources: MetricsSources): Metrics {
  const registry = new Registry();
  const requests = registry.counter<{ route: string; status: string }>({
    name: `${PREFIX}http_requests_total`,
    help: "HTTP requests answered, by route (the route table's path, mcp, or unknown) and status.",
    labelNames: ["route", "status"],
  });
  const requestDuration = registry.histogram<{ route: string }>({
    name: `${PREFIX}http_request_duration_seconds`,
    help: "Time to answer a request (to the response headers), by route.",
    labelNames: ["route"],
    buckets: REQUEST_BUCKETS,
  });
  const signInsStarted = registry.counter<{ mode: SignInMode }>({
    name: `${PREFIX}sign_ins_started_total`,
    help: "Sign-ins started: a device flow at the upstream, or a redirect sign-in at /authorize.",
    labelNames: ["mode"],
  });
  const signInsFinished = registry.counter<{ mode: SignInMode; outcome: SignInOutcome }>({
    name: `${PREFIX}sign_ins_finished_total`,
    help: "Sign-ins ended: completed, denied, failed, expired, or refused (allow-list).",
    labelNames: ["mode", "outcome"],
  });
  const tokenGrants = registry.counter<{ grant_type: GrantTypeLabel; outcome: GrantOutcome }>({
    name: `${PREFIX}token_grants_total`,
    help: "Token requests by grant type and outcome (issued, or the OAuth error code).",
    labelNames: ["grant_type", "outcome"],
  });
  const deviceAuthorizations = registry.counter<{ outcome: DeviceAuthorizationOutcome }>({
    name: `${PREFIX}device_authorizations_total`,
    help: "Device authorizations (RFC 8628): started, approved, denied, expired.",
    labelNames: ["outcome"],
    initial: DEVICE_AUTHORIZATION_OUTCOMES.map((outcome) => ({ outcome })),
  });
  const refreshReplays = registry.counter<{ outcome: RefreshReplayOutcome }>({
    name: `${PREFIX}refresh_replays_total`,
    help: "Rotated refresh tokens presented again: within grace, session ended, or refused.",
    labelNames: ["outcome"],
    initial: [{ outcome: "grace" }, { outcome: "session_ended" }, { outcome: "refused" }],
  });
  const revocations = registry.counter<{ outcome: RevocationOutcome }>({
    name: `${PREFIX}revocations_total`,
    help:
      "POST /revoke requests (a session ended, or no session for the token), and sessions ended by the operator's CLI.",
    labelNames: ["outcome"],
    initial: REVOCATION_OUTCOMES.map((outcome) => ({ outcome })),
  });
  const operatorRevocations = createOperatorRevocations(
    sources,
    (sessions) => revocations.inc({ outcome: "operator" }, sessions),
  );
  const gatewayCounter = registry.counter<
    { server: string; method: string; outcome: GatewayOutcome; tool: string }
  >({
    name: `${PREFIX}gateway_messages_total`,
    help:
      `MCP messages at the gateway by server (a configured name), JSON-RPC method (MCP's own, else other), outcome and tool (one an MCP server listed or a policy rule names, up to ${MAX_TOOL_LABELS}, else other).`,
    labelNames: ["server", "method", "outcome", "tool"],
  });
  const mcpUpstreamResponses = registry.counter<{ server: string; status: string }>({
    name: `${PREFIX}gateway_upstream_responses_total`,
    help:
      "The MCP servers' answers to forwarded requests, by server (a configured name) and status (or timeout, network).",
    labelNames: ["server", "status"],
  });
  const gitlabRequests = registry.counter<{ endpoint: GitLabEndpoint; status: string }>({
    name: `${PREFIX}gitlab_requests_total`,
    help:
      "Calls to GitLab by endpoint (membership: a group member lookup) and status (or timeout, network).",
    labelNames: ["endpoint", "status"],
  });
  const rateLimitRefusals = registry.counter<{ bucket: BucketLabel }>({
    name: `${PREFIX}rate_limit_refusals_total`,
    help: "Requests refused with 429 by the rate limits, by bucket.",
    labelNames: ["bucket"],
    initial: RATE_LIMIT_BUCKETS.map((bucket) => ({ bucket })),
  });
  const storeCommitDuration = registry.histogram<Record<never, string>>({
    name: `${PREFIX}store_commit_duration_seconds`,
    help: "Duration of each KV commit (a group commit counts once).",
    labelNames: [],
    buckets: COMMIT_BUCKETS,
  });
  const sessionsAlive = createSessionsAlive(sources);
  registry.gauge({
    name: `${PREFIX}sessions_alive`,
    help: "Live sessions in the store (shared by every process), counted at most once a minute.",
    read: sessionsAlive.read,
  });

  // Tools earn a label when listed or named in a rule (learnTool), never by being called.
  const tools = new BoundedLabel(MAX_TOOL_LABELS);
  const methods: ReadonlySet<string> = new Set(MCP_METHODS);
  const workers = sources.workers && shareCounts(sources.workers, () => registry.snapshot());

  return {
    observeRequest(route, status, ms) {
      requests.inc({ route, status: String(status) });
      requestDuration.observe({ route }, ms / 1000);
    },
    requests,
    requestDuration,
    signInsStarted,
    signInsFinished,
    tokenGrants,
    async countGrant(grantType, run) {
      const grant_type = grantTypeLabel(grantType);
      try {
        const response = await run();
        tokenGrants.inc({ grant_type, outcome: "issued" });
        return response;
      } catch (error) {
        tokenGrants.inc({ grant_type, outcome: grantErrorOutcome(error) });
        throw error;
      }
    },
    refreshReplays,
    deviceAuthorizations,
    revocations,
    gatewayMessages: {
      inc({ server, method, outcome, tool }) {
        const methodLabel = method === UNPARSED_METHOD || methods.has(method) ? method : "other";
        const toolLabel = tool === NO_TOOL || tools.has(tool) ? tool : "other";
        gatewayCounter.inc({ server, method: methodLabel, outcome, tool: toolLabel });
      },
      learnTool: (name) => void tools.of(name),
    },
    mcpUpstreamResponses,
    observeGitLabCall(endpoint, result) {
      gitlabRequests.inc({ endpoint, status: String(result) });
    },
    gitlabRequests,
    rateLimitRefusals,
    observeStoreCommit(ms) {
      storeCommitDuration.observe(NO_LABELS, ms / 1000);
    },
    storeCommitDuration,
    async render() {
      await operatorRevocations.take();
      return await registry.render(await workers?.collect());
    },
  };
}

/** The error code the app answers `error` with (app.ts renderError): a store outage is a 503. */
function grantErrorOutcome(error: unknown): GrantOutcome {
  if (error instanceof OAuthError) return error.code;
  return error instanceof StoreUnavailableError ? storeUnavailableError().code : "server_error";
}

function grantTypeLabel(servedGrantType: string | undefined): GrantTypeLabel {
  return servedGrantType ?? OTHER_GRANT_TYPE;
}
