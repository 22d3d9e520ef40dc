/**
 * Gateway mode (MCP_UPSTREAM_URL set): every request to the MCP resource path is authenticated
 * with the resource guard and forwarded to the MCP server with the user's upstream token in place
 * of ours. A request's body is read whole first (bounded: its JSON-RPC message is checked and
 * decided before anything goes on); answers stream back, so Server-Sent Events reach the client
 * event by event. Only allow-listed headers pass either way (headers.ts), and an
 * `Mcp-Session-Id` works only with the session it was handed to.
 *
 * @see MCP spec "Streamable HTTP", "Authorization" and security best practices ("Session
 *   Hijacking")
 */

import type { AppDeps, OAuthRequestContext } from "../app/context.ts";
import { MCP_CORS } from "../http/cors.ts";
import { UTF8 } from "../http/bytes.ts";
import { OAuthError } from "../http/errors.ts";
import { type HeaderSnapshot, snapshotHeaders, upstreamRequestHeaders } from "./headers.ts";
import type { McpAnswer, McpClient } from "./mcp_client/types.ts";
import { BearerChallengeError } from "./challenges.ts";
import {
  type AuthenticatedRequest,
  authenticateForGateway,
  CLOCK_TOLERANCE_SECONDS,
  type GatewayRequest,
  type GuardDeps,
} from "./guard.ts";
import { mcpResourceUrl } from "../http/resource.ts";
import type { Route } from "../app/router.ts";
import { MCP_TOOLS_SCOPE } from "../scopes.ts";
import { createDeadlines, type Deadline, type Deadlines } from "./deadlines.ts";
import { type Audit, type AuditContext, type AuditOutcome, createAudit } from "./audit.ts";
import {
  headerMismatchResponse,
  inspectPost,
  type McpMessage,
  type McpPost,
  metadataHeaders,
  oversizedBatchResponse,
} from "./mcp_message.ts";
import { StoreUnavailableError } from "../store/backend.ts";
import { createSessionRateLimit, type SessionRateLimit } from "./session_rate_limit.ts";
import { readBoundedBody } from "./request_body.ts";
import { type GatewayOutcome, NO_TOOL, UNPARSED_METHOD } from "../metrics/catalog.ts";
import {
  ambiguousRequest,
  ambiguousRequestResponse,
  callerOf,
  decideMessages,
  refusedCallResponse,
  unreadableBodyResponse,
} from "./call_check.ts";
import { listRequestsOf, type Permits } from "./list_filter.ts";
import { decideCall } from "../access/call_policy.ts";
import { accessPolicyOf } from "../access/config.ts";
import {
  rememberedOwner,
  requireOwnMcpSession,
  storeReadingOwner,
  trackMcpSession,
} from "./mcp_session_binding.ts";
import { relayResponse } from "./relay.ts";

/** The gateway as the app sees it. */
export interface McpGateway {
  /** The gateway's route when `url` is the MCP resource path, else undefined. */
  route(url: URL, baseUrl: string): Route | undefined;
}

/** Methods forwarded; OPTIONS is answered by the app as a CORS preflight. */
const FORWARDED_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] as const;

/** The gateway over `deps`, or undefined when MCP_UPSTREAM_URL is not configured. */
export function createMcpGateway(deps: AppDeps): McpGateway | undefined {
  const upstreamUrl = deps.config.mcpUpstreamUrl;
  const client = deps.mcpClient;
  if (!upstreamUrl || !client) return undefined;
  const gateway: Gateway = {
    upstreamUrl,
    client,
    guard: undefined,
    deadlines: createDeadlines(deps.config.mcpUpstreamTimeoutMs),
    resourceFor: lastValueMemo((baseUrl) => mcpResourceUrl(deps.config, baseUrl)),
    audit: createAudit(deps.logger, deps.config.auditLog),
    rateLimit: createSessionRateLimit(deps, deps.config.rateLimits.mcp),
  };
  const handler = (ctx: OAuthRequestContext) => handleGatewayRequest(ctx, gateway);
  const route: Route = {
    methods: Object.fromEntries(FORWARDED_METHODS.map((method) => [method, handler])),
    oauth: true,
    cors: MCP_CORS,
  };
  const pathFor = lastValueMemo((baseUrl: string) => resourcePath(deps, baseUrl));
  return {
    route: (url, baseUrl) => trimPath(url.pathname) === pathFor(baseUrl) ? route : undefined,
  };
}

/** What every gateway request shares: where to, the guard's dependencies, the time limits. */
interface Gateway {
  upstreamUrl: URL;
  client: McpClient;
  /** Built on the first request, from the OAuth dependencies only a configured service has. */
  guard: GuardDeps | undefined;
  deadlines: Deadlines;
  audit: Audit;
  /** RATE_LIMIT_MCP; undefined when `off`. */
  rateLimit: SessionRateLimit | undefined;
  /** The MCP resource URL for a base URL (the same string for every request to one host). */
  resourceFor(baseUrl: string): string;
}

/**
 * `compute` remembering its last argument and result: the base URL is the same on every request
 * with BASE_URL set, and nearly always without it.
 */
function lastValueMemo<T>(compute: (key: string) => T): (key: string) => T {
  let last: { key: string; value: T } | undefined;
  return (key) => {
    if (last?.key !== key) last = { key, value: compute(key) };
    return last.value;
  };
}

/** The resource guard's dependencies: the service's own store, upstream, signer and memory. */
function guardDeps(ctx: OAuthRequestContext): GuardDeps {
  const { store, clock, logger, verifiedTokens } = ctx.deps;
  return {
    store,
    clock,
    logger,
    upstream: ctx.oauth.upstream,
    signer: ctx.oauth.signer,
    clockToleranceSeconds: CLOCK_TOLERANCE_SECONDS,
    accessTokenTtlSeconds: ctx.deps.config.accessTokenTtlSeconds,
    upstreamTimeoutMs: ctx.deps.config.upstreamTimeoutMs,
    requiredScope: MCP_TOOLS_SCOPE,
    verifiedTokens,
  };
}

async function handleGatewayRequest(
  ctx: OAuthRequestContext,
  gateway: Gateway,
): Promise<Response> {
  const resource = gateway.resourceFor(ctx.baseUrl);
  const headers = snapshotHeaders(ctx.request.headers);
  const mcpSessionId = headers["mcp-session-id"] ?? null;
  const owner = rememberedOwner(ctx, mcpSessionId);
  const guard = gateway.guard ??= guardDeps(ctx);
  const deps = mcpSessionId === null || owner.read
    ? guard
    : { ...guard, store: storeReadingOwner(ctx.deps.store, mcpSessionId, owner) };
  const authenticating = authenticated(ctx, gateway, deps, headers, resource);
  const auth = authenticating instanceof Promise ? await authenticating : authenticating;
  const audit: AuditContext = {
    requestId: ctx.requestId,
    auth,
    mcpSessionId,
    protocolVersion: headers["mcp-protocol-version"],
    messages: [],
    startedMs: ctx.startedMs,
  };
  // Read once: a SIGHUP mid-request does not change this request's decisions.
  const policy = ctx.deps.callPolicy.current();
  try {
    const taking = gateway.rateLimit?.take(auth.sessionId, 1);
    if (taking) await taking;
    if (mcpSessionId !== null) await requireOwnMcpSession(ctx, auth, mcpSessionId, owner);
  } catch (error) {
    gateway.audit.record(audit, refusalOutcome(error));
    throw error;
  }
  // One time limit from here to the MCP server's response headers, body upload included.
  const deadline = gateway.deadlines.start();
  let body: Uint8Array<ArrayBuffer> | null = null;
  try {
    if (readsBody(ctx.request.method)) {
      body = await readBoundedBody(ctx.request, headers["content-length"], deadline);
    }
  } catch (error) {
    deadline.done();
    gateway.audit.record(audit, refusalOutcome(error));
    throw error;
  }
  // Any method's body: what a PUT carries is decided as a POST's would be.
  const post = body === null ? undefined : inspectPost(body, metadataHeaders(headers));
  if (post) {
    audit.protocolVersion = post.protocolVersion ?? audit.protocolVersion;
    audit.messages = post.messages;
  }
  gateway.audit.annotate(audit);
  if (post?.oversized !== undefined) {
    deadline.done();
    audit.batchSize = post.oversized;
    gateway.audit.record(audit, { status: 400 });
    countMessages(ctx, audit.messages, "denied");
    return oversizedBatchResponse(post.oversized);
  }
  if (post && post.messages.length > 1 && gateway.rateLimit) {
    try {
      // The first message was counted on arrival; a batch counts each of the others too.
      await gateway.rateLimit.take(auth.sessionId, post.messages.length - 1);
    } catch (error) {
      deadline.done();
      gateway.audit.record(audit, refusalOutcome(error));
      throw error;
    }
  }
  if (post?.mismatch !== undefined) {
    deadline.done();
    gateway.audit.record(audit, { status: 400 });
    return headerMismatchResponse(post.batch ? null : post.messages[0]?.id, post.mismatch);
  }
  if (policy && post?.unreadable) {
    deadline.done();
    gateway.audit.record(audit, { status: 400 });
    countMessages(ctx, audit.messages, "denied");
    return unreadableBodyResponse();
  }
  const caller = policy && callerOf(auth, listedGroupsOf(ctx));
  const ambiguous = policy && body && post && ambiguousRequest(UTF8.decode(body), post.messages);
  if (ambiguous) {
    deadline.done();
    gateway.audit.record(audit, { status: 400 });
    countMessages(ctx, audit.messages, "denied");
    return ambiguousRequestResponse(ambiguous);
  }
  if (policy && caller && post && decideMessages(policy, caller, post.messages)) {
    deadline.done();
    return refuseCall(ctx, gateway, audit, post);
  }
  const lists = policy && caller ? listRequestsOf(post?.messages ?? []) : undefined;
  const permits: Permits | undefined = policy && caller &&
    ((target, name) => decideCall(policy, caller, target, name).effect === "allow");
  let upstream: McpAnswer | undefined;
  try {
    upstream = await forward(ctx, auth, gateway, headers, body, deadline);
    const issued = upstream.headers["mcp-session-id"];
    const tracking = trackMcpSession(ctx, auth, mcpSessionId, issued, upstream.ok);
    if (tracking) await tracking;
  } catch (error) {
    // An answer that came but is not relayed gives up its connection.
    await upstream?.cancel();
    gateway.audit.record(audit, { status: error instanceof OAuthError ? error.status : 500 });
    countMessages(ctx, audit.messages, "upstream_error");
    throw error;
  }
  countMessages(ctx, audit.messages, "allowed");
  if (upstream.status === 401) {
    // Its challenge would send the client to someone else's authorization server.
    await upstream.cancel();
    gateway.audit.record(audit, { status: 401 });
    throw BearerChallengeError.invalidToken(
      resource,
      `The MCP server refused the ${ctx.oauth.upstream.profile.displayName} token; sign in again`,
    );
  }
  // With a policy every event stream is filtered, a GET's (and its replays) too.
  const filter = lists && permits ? { lists, permits } : undefined;
  return await relayResponse(ctx, upstream, auth, gateway.audit, audit, filter);
}

/**
 * The request's authentication; a refusal (401 or 403 with its challenge, 503 when GitLab could
 * not renew an expired token) writes its audit line before it is answered.
 */
function authenticated(
  ctx: OAuthRequestContext,
  gateway: Gateway,
  deps: GuardDeps,
  headers: HeaderSnapshot,
  resource: string,
): GatewayRequest | Promise<GatewayRequest> {
  const refused = (error: unknown): never => {
    const context = {
      requestId: ctx.requestId,
      startedMs: ctx.startedMs,
      protocolVersion: headers["mcp-protocol-version"],
    };
    gateway.audit.recordUnauthenticated(context, refusalOutcome(error));
    throw error;
  };
  try {
    const authenticating = authenticateForGateway(deps, headers["authorization"] ?? null, {
      issuer: ctx.baseUrl,
      resource,
    });
    return authenticating instanceof Promise ? authenticating.catch(refused) : authenticating;
  } catch (error) {
    return refused(error);
  }
}

/** How a thrown refusal ends the exchange, for its audit line. */
function refusalOutcome(error: unknown): AuditOutcome {
  if (error instanceof OAuthError) return { status: error.status, error: error.code };
  return { status: error instanceof StoreUnavailableError ? 503 : 500 };
}

/** Counts each message of a request (one unparsed message for a body the gateway did not read). */
function countMessages(
  ctx: OAuthRequestContext,
  messages: readonly McpMessage[],
  outcome: GatewayOutcome,
): void {
  const { gatewayMessages } = ctx.deps.metrics;
  if (messages.length === 0) {
    gatewayMessages.inc({ method: UNPARSED_METHOD, outcome, tool: NO_TOOL });
  }
  for (const { method, name } of messages) {
    const tool = method === "tools/call" && name !== undefined ? name : NO_TOOL;
    gatewayMessages.inc({ method: method ?? UNPARSED_METHOD, outcome, tool });
  }
}

/**
 * A POST carrying a call the policy refuses: answered here, never forwarded.
 * Metrics hook: this is the gateway's "denied by policy" outcome (one per refused POST).
 */
function refuseCall(
  ctx: OAuthRequestContext,
  gateway: Gateway,
  audit: AuditContext,
  post: McpPost,
): Response {
  const response = refusedCallResponse(
    post.messages,
    post.batch,
    ctx.deps.config.mcpPolicyErrorCode,
  );
  gateway.audit.record(audit, { status: response.status, rpcError: response.status === 200 });
  countMessages(ctx, post.messages, "denied");
  return response;
}

/** The group paths of ALLOWED_GITLAB_GROUPS: what a session's record asked by default. */
function listedGroupsOf(ctx: OAuthRequestContext): string[] {
  return accessPolicyOf(ctx.deps.config).groups.map((group) => group.path);
}

/**
 * Whether the request has a body to read before it is forwarded: every one but a GET's or a
 * HEAD's. A POST's JSON-RPC message is read whatever its revision and framing (an upload of
 * unknown length too): its headers are checked against it, a policy decides from it, and the
 * audit line names it.
 */
function readsBody(method: string): boolean {
  return method !== "GET" && method !== "HEAD";
}

/**
 * Sends the request on (to MCP_UPSTREAM_URL as configured: the client's query string is never
 * passed, since MCP sends none and a stray `private_token` or `sudo` must not reach a
 * GitLab-backed server) and hands back the MCP server's answer as it came; `deadline` covers
 * only the wait for its headers, so an open stream is never cut by it.
 */
async function forward(
  ctx: OAuthRequestContext,
  auth: AuthenticatedRequest,
  gateway: Gateway,
  headers: HeaderSnapshot,
  body: Uint8Array<ArrayBuffer> | null,
  deadline: Deadline,
): Promise<McpAnswer> {
  const { request, deps } = ctx;
  try {
    const answer = await gateway.client.send({
      url: gateway.upstreamUrl,
      method: request.method,
      headers: upstreamRequestHeaders(
        headers,
        deps.config.mcpUpstreamForwardHeaders ?? [],
        {
          header: deps.config.mcpUpstreamTokenHeader,
          value: auth.gitlabToken,
        },
      ),
      body,
      // Not request.signal: Deno.serve aborts it after every response. A client that leaves
      // mid-stream cancels the relayed body, which closes the upstream exchange too.
      deadline,
    });
    deps.metrics.mcpUpstreamResponses.inc({ status: String(answer.status) });
    return answer;
  } catch (error) {
    throw upstreamFailure(ctx, auth, error, deadline.signal.aborted);
  } finally {
    deadline.done();
  }
}

/** 504 when the response headers did not arrive in time, else 502. */
function upstreamFailure(
  ctx: OAuthRequestContext,
  auth: AuthenticatedRequest,
  error: unknown,
  timedOut: boolean,
): OAuthError {
  const timeoutMs = ctx.deps.config.mcpUpstreamTimeoutMs;
  ctx.deps.metrics.mcpUpstreamResponses.inc({ status: timedOut ? "timeout" : "network" });
  ctx.deps.logger.warn(timedOut ? "MCP server timed out" : "MCP server unreachable", {
    requestId: ctx.requestId,
    sessionId: auth.sessionId,
    error: error instanceof Error ? error.name : String(error),
  });
  return timedOut
    ? new OAuthError(
      504,
      "gateway_timeout",
      `The MCP server did not answer within ${timeoutMs} ms`,
    )
    : new OAuthError(502, "bad_gateway", "The MCP server could not be reached");
}

/** The path of the MCP resource URL (which may be on another host). */
function resourcePath(deps: AppDeps, baseUrl: string): string {
  return trimPath(new URL(mcpResourceUrl(deps.config, baseUrl)).pathname);
}

function trimPath(pathname: string): string {
  return pathname.replace(/\/+$/, "") || "/";
}
