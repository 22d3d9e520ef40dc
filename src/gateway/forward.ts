/**
 * The hop to the MCP server: the request sent on (to MCP_UPSTREAM_URL as configured, the
 * client's query string never passed: MCP sends none, and a stray `private_token` or `sudo`
 * must not reach a GitLab-backed server) with the user's GitLab token in place of ours, and the
 * MCP server's answer handed back as it came. The deadline covers only the wait for its headers,
 * so an open stream is never cut by it.
 */

import { OAuthError } from "../http/errors.ts";
import type { Deadline } from "./deadlines.ts";
import type { AuthenticatedRequest, GatewayRequest } from "./guard.ts";
import { type HeaderSnapshot, upstreamRequestHeaders, type UpstreamToken } from "./headers.ts";
import type { McpAnswer } from "./mcp_client/types.ts";
import type { Gateway } from "./deps.ts";

const NO_TOKEN: UpstreamToken = { header: "none", value: "" };

/** What goes to the MCP server besides the method. */
export interface Outgoing {
  headers: HeaderSnapshot;
  body: Uint8Array<ArrayBuffer> | null;
  deadline: Deadline;
}

/** Sends the request on; 502 when the MCP server cannot be reached, 504 when it is too slow. */
export async function forward(
  gateway: Gateway,
  requestId: string,
  method: string,
  auth: GatewayRequest,
  outgoing: Outgoing,
): Promise<McpAnswer> {
  const { config, metrics } = gateway.deps;
  const { deadline } = outgoing;
  let answer: McpAnswer;
  try {
    answer = await gateway.client.send({
      url: gateway.upstreamUrl,
      method,
      headers: upstreamRequestHeaders(
        outgoing.headers,
        config.mcpUpstreamForwardHeaders ?? [],
        upstreamToken(gateway, auth),
      ),
      body: outgoing.body,
      // Not request.signal: Deno.serve aborts it after every response. A client that leaves
      // mid-stream cancels the relayed body, which closes the upstream exchange too.
      deadline,
    });
    metrics.mcpUpstreamResponses.inc({
      server: gateway.server,
      status: String(answer.status),
    });
  } catch (error) {
    throw upstreamFailure(gateway, requestId, auth, error, deadline.signal.aborted);
  } finally {
    deadline.done();
  }
  if (!isFinalStatus(answer.status)) throw await unrelayableStatus(gateway, requestId, answer);
  return answer;
}

/**
 * Whether `status` is one an answer can be relayed with: a `Response` takes 200–599 only, and an
 * HTTP/1.1 status line may carry any three digits (`999`).
 */
function isFinalStatus(status: number): boolean {
  return status >= 200 && status <= 599;
}

/** 502 for an answer whose status no response can carry; its connection is given up. */
async function unrelayableStatus(
  gateway: Gateway,
  requestId: string,
  answer: McpAnswer,
): Promise<OAuthError> {
  await answer.cancel();
  gateway.deps.logger.warn("MCP server answered an invalid HTTP status", {
    requestId,
    status: answer.status,
  });
  return new OAuthError(502, "bad_gateway", "The MCP server answered an invalid HTTP status");
}

/**
 * The GitLab token the MCP server receives, in its header: the user's, or a machine caller's
 * rule's `gitlab_token_file` token, or (a rule without one) none at all.
 */
function upstreamToken(gateway: Gateway, auth: GatewayRequest): UpstreamToken {
  if (!auth.machine) return { header: gateway.tokenHeader, value: auth.gitlabToken };
  const token = auth.machine.grant.gitlabToken;
  return token ? { header: gateway.tokenHeader, value: token.reveal() } : NO_TOKEN;
}

/** 504 when the response headers did not arrive in time, else 502. */
function upstreamFailure(
  gateway: Gateway,
  requestId: string,
  auth: AuthenticatedRequest,
  error: unknown,
  timedOut: boolean,
): OAuthError {
  const { metrics, logger } = gateway.deps;
  metrics.mcpUpstreamResponses.inc({
    server: gateway.server,
    status: timedOut ? "timeout" : "network",
  });
  logger.warn(timedOut ? "MCP server timed out" : "MCP server unreachable", {
    requestId,
    sessionId: auth.sessionId,
    error: error instanceof Error ? error.name : String(error),
  });
  return timedOut
    ? new OAuthError(
      504,
      "gateway_timeout",
      `The MCP server did not answer within ${gateway.deadlines.limitMs} ms`,
    )
    : new OAuthError(502, "bad_gateway", "The MCP server could not be reached");
}
