/**
 * One request through the gateway, as ordered steps: authenticate, bind the MCP session and the
 * `Last-Event-ID` (and the per-session rate), read the body, check it (size, headers, what a
 * policy cannot decide), apply the policy, relay. A step hands the exchange on or exits; every
 * exit goes through `finish` (the deadline ends, the audit line is written, the messages are
 * counted, alike for every outcome). A relayed answer is audited when it ends (a stream's later).
 *
 * @see MCP spec "Streamable HTTP", "Authorization" and security best practices
 */

import type { CallPolicy } from "../access/call_policy.ts";
import { UTF8 } from "../http/bytes.ts";
import { OAuthError, storeUnavailableError } from "../http/errors.ts";
import type { RequestContext } from "../http/request_context.ts";
import { type GatewayOutcome, NO_TOOL, UNPARSED_METHOD } from "../metrics/catalog.ts";
import { StoreUnavailableError } from "../store/backend.ts";
import { DEFAULT_SERVER } from "../servers/file.ts";
import type { AuditContext, AuditOutcome } from "./audit.ts";
import {
  ambiguousRequest,
  ambiguousRequestResponse,
  decideMessages,
  refusedCallResponse,
  unreadableBodyResponse,
} from "./call_check.ts";
import { BearerChallengeError } from "./challenges.ts";
import { missingScopes } from "./call_scopes.ts";
import type { Deadline } from "./deadlines.ts";
import { forward } from "./forward.ts";
import { authenticateForGateway, type GatewayRequest } from "./guard.ts";
import { guardDeps } from "./guard_deps.ts";
import { endToEndHeaders, type HeaderSnapshot, snapshotHeaders } from "./headers.ts";
import {
  headerMismatchResponse,
  inspectPost,
  type McpMessage,
  type McpPost,
  metadataHeaders,
  oversizedBatchResponse,
} from "./mcp_message.ts";
import {
  type McpSessionOwner,
  rememberedOwner,
  requireOwnMcpSession,
  storeReadingOwner,
  trackMcpSession,
} from "./mcp_session_binding.ts";
import type { Gateway, GatewayOAuth } from "./deps.ts";
import { endsAtShutdown, relayResponse } from "./relay.ts";
import { resumedFrom } from "./event_ids.ts";
import { answerListFilter } from "./answer_lists.ts";
import { type CallRules, callRulesFor } from "./call_rules.ts";
import { readBoundedBody } from "./request_body.ts";
import { resourceAsRequested } from "../http/resource.ts";

/** A request to the gateway: its facts, and the provider and signer OAuth configuration has. */
export type GatewayContext = RequestContext<unknown> & { oauth: GatewayOAuth };

/** One exchange, as the steps fill it in. */
interface Exchange {
  ctx: GatewayContext;
  gateway: Gateway;
  resource: string;
  headers: HeaderSnapshot;
  mcpSessionId: string | null;
  owner: McpSessionOwner;
  /** Read once: a reload mid-request does not change this request's decisions. */
  policy: CallPolicy | undefined;
  /** Set by `authenticate`; every later step has it. */
  auth?: GatewayRequest;
  audit?: AuditContext;
  /** From reading the body to the MCP server's response headers. */
  deadline?: Deadline;
  body: Uint8Array<ArrayBuffer> | null;
  post?: McpPost;
  /** Set by `chooseRules`: what decides the calls (a person's policy, a machine's rule). */
  rules?: CallRules;
}

/** How an exchange ends. */
type Exit =
  /** Answered here: audited with `outcome`, its messages counted as `counted` when given. */
  | { response: Response; outcome: AuditOutcome; counted?: GatewayOutcome }
  /** Refused or failed with `error` (the app renders it), audited and counted the same way. */
  | { error: unknown; outcome: AuditOutcome; counted?: GatewayOutcome }
  /** Relayed (allowed) or failed relaying (upstream_error); the relay writes the audit line. */
  | { relayed: Response }
  | { relayFailed: unknown };

/** A step: hands the exchange on (undefined) or ends it. */
type Step = (x: Exchange) => Exit | undefined | Promise<Exit | undefined>;

/** The gateway's request path, in order. */
const STEPS: readonly Step[] = [
  authenticate,
  chooseRules,
  bindSession,
  readBody,
  requireCallScopes,
  checkBody,
  applyPolicy,
  relay,
];

/** Runs one request through the steps; every outcome leaves through `finish`. */
export async function runExchange(ctx: GatewayContext, gateway: Gateway): Promise<Response> {
  const headers = endToEndHeaders(snapshotHeaders(ctx.request.headers));
  const mcpSessionId = headers["mcp-session-id"] ?? null;
  const x: Exchange = {
    ctx,
    gateway,
    resource: resourceAsRequested(gateway.resourceFor(ctx.baseUrl), ctx.url.pathname),
    headers,
    mcpSessionId,
    owner: rememberedOwner(gateway.deps, mcpSessionId),
    policy: gateway.ownPolicy ?? gateway.deps.callPolicy.rules.callPolicy,
    body: null,
  };
  for (const step of STEPS) {
    let exit: Exit | undefined;
    try {
      const stepping = step(x);
      exit = stepping instanceof Promise ? await stepping : stepping;
    } catch (error) {
      exit = { error, outcome: refusalOutcome(error) };
    }
    if (exit !== undefined) return finish(x, exit);
  }
  throw new Error("the gateway's last step relays: every exchange exits");
}

/** The one exit: the deadline ends, the audit line is written, the messages are counted. */
function finish(x: Exchange, exit: Exit): Response {
  x.deadline?.done();
  const { audit } = x.gateway;
  if ("relayed" in exit || "relayFailed" in exit) {
    countMessages(x, "relayFailed" in exit ? "upstream_error" : "allowed");
    if ("relayFailed" in exit) throw exit.relayFailed;
    return exit.relayed;
  }
  if (x.audit) audit.record(x.audit, exit.outcome);
  else audit.recordUnauthenticated(unauthenticatedContext(x), exit.outcome);
  if (exit.counted) countMessages(x, exit.counted);
  if ("error" in exit) throw exit.error;
  return exit.response;
}

/** Checks the access token; a refusal (401, 403, 503) is audited with no user. */
function authenticate(x: Exchange): Promise<undefined> | undefined {
  const { ctx, gateway, mcpSessionId, owner } = x;
  const guard = gateway.guard ??= guardDeps(gateway, ctx.oauth);
  const deps = mcpSessionId === null || owner.read
    ? guard
    : { ...guard, store: storeReadingOwner(guard.store, mcpSessionId, owner) };
  const authenticating = authenticateForGateway(deps, x.headers["authorization"] ?? null, {
    issuer: ctx.baseUrl,
    resource: x.resource,
    refusesUnbound: gateway.server !== DEFAULT_SERVER,
  });
  const authenticated = (auth: GatewayRequest): undefined => {
    x.auth = auth;
    x.audit = {
      requestId: ctx.requestId,
      auth,
      mcpSessionId,
      protocolVersion: x.headers["mcp-protocol-version"],
      messages: [],
      startedMs: ctx.startedMs,
    };
    return undefined;
  };
  return authenticating instanceof Promise
    ? authenticating.then(authenticated)
    : authenticated(authenticating);
}

/** The rules deciding this caller's calls; a machine caller only at its rule's servers. */
function chooseRules(x: Exchange): undefined {
  x.rules = callRulesFor(x.gateway, authOf(x), x.policy, x.resource);
  return undefined;
}

/** RATE_LIMIT_MCP's first message; an `Mcp-Session-Id` or event id only with its session. */
async function bindSession(x: Exchange): Promise<undefined> {
  const auth = authOf(x);
  const taking = x.gateway.rateLimit?.take(auth, 1);
  if (taking) await taking;
  if (x.mcpSessionId !== null) {
    await requireOwnMcpSession(x.gateway.deps, auth, x.mcpSessionId, x.owner);
  }
  x.headers = resumedFrom(x.ctx.oauth.eventIds, x.headers, auth.sessionId, x.gateway.server);
  return undefined;
}

/** Starts the deadline and reads the body whole (bounded), for every method but GET and HEAD. */
async function readBody(x: Exchange): Promise<undefined> {
  x.deadline = x.gateway.deadlines.start();
  if (!readsBody(x.ctx.request.method)) return undefined;
  x.body = await readBoundedBody(x.ctx.request, x.headers["content-length"], x.deadline);
  // Any method's body: what a PUT carries is decided as a POST's would be.
  const post = inspectPost(x.body, metadataHeaders(x.headers));
  const audit = auditOf(x);
  audit.protocolVersion = post.protocolVersion ?? audit.protocolVersion;
  audit.messages = post.messages;
  x.post = post;
  return undefined;
}

/** The scopes this request's calls need (no more): 403 `insufficient_scope` naming the missing. */
function requireCallScopes(x: Exchange): undefined {
  const missing = missingScopes(x.post?.messages ?? [], authOf(x).scopes);
  if (missing.length > 0) {
    throw BearerChallengeError.insufficientScope(x.resource, missing.join(" "));
  }
  return undefined;
}

/**
 * The body's own checks: a batch over the cap, the rest of a batch's rate, the metadata headers
 * against the body, and, with a policy, a body it cannot read or could read two ways.
 */
async function checkBody(x: Exchange): Promise<Exit | undefined> {
  x.gateway.audit.annotate(auditOf(x));
  const { post } = x;
  if (post === undefined) return undefined;
  if (post.oversized !== undefined) {
    auditOf(x).batchSize = post.oversized;
    return answered(oversizedBatchResponse(post.oversized), "denied");
  }
  if (post.messages.length > 1 && x.gateway.rateLimit) {
    // The first message was counted on arrival; a batch counts each of the others too.
    await x.gateway.rateLimit.take(authOf(x), post.messages.length - 1);
  }
  if (post.mismatch !== undefined) {
    const id = post.batch ? null : post.messages[0]?.id;
    return answered(headerMismatchResponse(id, post.mismatch));
  }
  if (!x.rules?.decide) return undefined;
  if (post.unreadable) return answered(unreadableBodyResponse(), "denied");
  const ambiguous = x.body && ambiguousRequest(UTF8.decode(x.body), post.messages);
  return ambiguous ? answered(ambiguousRequestResponse(ambiguous), "denied") : undefined;
}

/**
 * MCP_POLICY_FILE (a person) or the caller's machine rule: a POST with a refused call is
 * answered here, never forwarded.
 */
function applyPolicy(x: Exchange): Exit | undefined {
  const { post } = x;
  const decide = x.rules?.decide;
  if (!decide || !post || !decideMessages(decide, post.messages)) return undefined;
  const { mcpPolicyErrorCode } = x.gateway.deps.config;
  const response = refusedCallResponse(post.messages, post.batch, mcpPolicyErrorCode);
  return {
    response,
    outcome: { status: response.status, rpcError: response.status === 200 },
    counted: "denied",
  };
}

/** Forwards the request and relays the MCP server's answer (filtered under a policy). */
async function relay(x: Exchange): Promise<Exit> {
  const { gateway, ctx } = x;
  const auth = authOf(x);
  let upstream;
  try {
    upstream = await forward(gateway, ctx.requestId, ctx.request.method, auth, {
      headers: x.headers,
      body: x.body,
      deadline: deadlineOf(x),
    });
    const tracking = trackMcpSession(gateway.deps, ctx.requestId, ctx.request.method, auth, {
      sent: x.mcpSessionId,
      // Bound even when its `Connection` names it (not relayed): no other session is handed it.
      issued: upstream.headers["mcp-session-id"],
      ok: upstream.ok,
    });
    if (tracking) await tracking;
  } catch (error) {
    // An answer that came but is not relayed gives up its connection.
    await upstream?.cancel();
    return { error, outcome: refusalOutcome(error), counted: "upstream_error" };
  }
  if (upstream.status === 401) {
    // Its challenge would send the client to someone else's authorization server.
    await upstream.cancel();
    const error = BearerChallengeError.invalidToken(
      x.resource,
      `The MCP server refused the ${ctx.oauth.upstream.profile.displayName} token; sign in again`,
    );
    return { error, outcome: { status: 401, error: error.code }, counted: "allowed" };
  }
  const filter = answerListFilter(x.gateway, x.rules?.decide, x.post?.messages);
  try {
    const relaying = {
      logger: gateway.deps.logger,
      openStreams: gateway.deps.openStreams,
      headers: ctx.standardHeaders(),
      server: gateway.server,
      eventIds: ctx.oauth.eventIds,
      endsAtShutdown: endsAtShutdown(ctx.request.method, x.post),
    };
    return {
      relayed: await relayResponse(relaying, upstream, auth, gateway.audit, auditOf(x), filter),
    };
  } catch (error) {
    return { relayFailed: error };
  }
}

/** An answer given here, audited with its status. */
function answered(response: Response, counted?: GatewayOutcome): Exit {
  return { response, outcome: { status: response.status }, counted };
}

/** How a thrown refusal ends the exchange, for its audit line (a store outage as app.ts says). */
function refusalOutcome(thrown: unknown): AuditOutcome {
  const error = thrown instanceof StoreUnavailableError ? storeUnavailableError() : thrown;
  return error instanceof OAuthError
    ? { status: error.status, error: error.code }
    : { status: 500 };
}

/** Counts each message of a request (one unparsed message for a body the gateway did not read). */
function countMessages(x: Exchange, outcome: GatewayOutcome): void {
  const { gatewayMessages } = x.gateway.deps.metrics;
  const { server } = x.gateway;
  const messages: readonly McpMessage[] = x.audit?.messages ?? [];
  if (messages.length === 0) {
    gatewayMessages.inc({ server, method: UNPARSED_METHOD, outcome, tool: NO_TOOL });
  }
  for (const { method, name } of messages) {
    const tool = method === "tools/call" && name !== undefined ? name : NO_TOOL;
    gatewayMessages.inc({ server, method: method ?? UNPARSED_METHOD, outcome, tool });
  }
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

function unauthenticatedContext(x: Exchange) {
  return {
    requestId: x.ctx.requestId,
    startedMs: x.ctx.startedMs,
    protocolVersion: x.headers["mcp-protocol-version"],
  };
}

function authOf(x: Exchange): GatewayRequest {
  if (!x.auth) throw new Error("a gateway step ran before authentication");
  return x.auth;
}

function deadlineOf(x: Exchange): Deadline {
  if (!x.deadline) throw new Error("a gateway step ran before the body was read");
  return x.deadline;
}

function auditOf(x: Exchange): AuditContext {
  if (!x.audit) throw new Error("a gateway step ran before authentication");
  return x.audit;
}
