/**
 * MCP_POLICY_FILE at the gateway: each message of a POST that calls a tool, reads a resource or
 * gets a prompt is decided before anything is forwarded; a POST with a refused message never
 * reaches the MCP server and is answered here. The answer is HTTP 200 with a JSON-RPC error
 * response of the same id, as an MCP server answers a request it will not serve: MCP clients
 * hand that to the caller as the call's error, while a 4xx is a transport failure to them (an
 * SDK throws it as an HTTP error, and a 403 may send it to re-authorize for more scope).
 *
 * @see docs/gateway.md "What they may call"
 */

import {
  type CallDecision,
  type Caller,
  type Target,
  targetOfCall,
} from "../access/call_policy.ts";
import type { Decide } from "../machine/decide.ts";
import type { GatewayRequest } from "./guard.ts";
import { firstDuplicateName } from "../http/json_duplicates.ts";
import type { McpMessage } from "./mcp_message.ts";

/**
 * JSON-RPC error code of a call the policy refuses, unless MCP_POLICY_ERROR_CODE says another:
 * outside -32099…-32000, the server range MCP 2026-07-28 splits between the SDKs' legacy codes
 * and its own (-32003, used before, sits in it). It is still inside JSON-RPC's wider reserved
 * block (-32768…-32000), which that policy asks new codes to avoid: a code such as `403` does.
 */
export const POLICY_REFUSED = -32403;
/** JSON-RPC's "Invalid Request": a body two parsers could read as different messages. */
const INVALID_REQUEST = -32600;
/** JSON-RPC's parse error. */
const PARSE_ERROR = -32700;
/** JSON-RPC's invalid params: a resource URI that is not in normal form. */
export const INVALID_PARAMS = -32602;

/** What is called in each target, for the refusal's message. */
const TARGET_WORDS: Readonly<Record<Target, string>> = {
  tools: "Tool",
  resources: "Resource",
  prompts: "Prompt",
};

/** The account behind a request, as the policy sees it. */
export function callerOf(auth: GatewayRequest, listedGroups: string[]): Caller {
  return { username: auth.user.username, userId: auth.user.id, access: auth.access, listedGroups };
}

/**
 * Decides every message that names a call (a person's policy, or a machine caller's rule); the
 * decision goes on the message (for the audit). Whether one was refused.
 */
export function decideMessages(decide: Decide, messages: McpMessage[]): boolean {
  let refused = false;
  for (const message of messages) {
    if (message.subscriptions !== undefined) {
      if (decideSubscriptions(decide, message)) refused = true;
      continue;
    }
    const target = targetOfCall(message.method);
    if (target === undefined) continue;
    // A call without a name is decided as the empty name: a `*` rule still applies to it.
    message.policy = decide(target, message.name ?? "");
    if (message.policy.effect === "deny") refused = true;
  }
  return refused;
}

/**
 * Decides a `subscriptions/listen`'s resource URIs as reads (a listen stream is 2026-07-28's
 * `resources/subscribe`): the first refused URI refuses the stream and becomes the message's
 * name, for the refusal and the audit line. Whether it is refused.
 */
function decideSubscriptions(decide: Decide, message: McpMessage): boolean {
  const uris = message.subscriptions;
  if (!Array.isArray(uris) || !uris.every((uri) => typeof uri === "string")) {
    message.policy = {
      effect: "deny",
      invalid: "notifications.resourceSubscriptions must be an array of URIs",
    };
    return true;
  }
  for (const uri of uris) {
    const decision = decide("resources", uri);
    if (decision.effect === "deny") {
      message.policy = decision;
      message.name = uri;
      return true;
    }
  }
  return false;
}

/**
 * The answer to a POST with a refused call: a JSON-RPC error for each request in it (in a batch,
 * the others are refused with it, since the batch is not forwarded in part).
 */
export function refusedCallResponse(
  messages: McpMessage[],
  batch: boolean,
  code: number = POLICY_REFUSED,
): Response {
  const answers = messages.filter((message) => message.id !== undefined && message.method)
    .map((message) => ({
      jsonrpc: "2.0",
      id: message.id,
      error: message.policy?.invalid
        ? { code: INVALID_PARAMS, message: `Invalid params: ${message.policy.invalid}` }
        : { code, message: refusalMessage(message) },
    }));
  // No requests, no answer: JSON-RPC 2.0 §6 forbids an empty array.
  if (answers.length === 0) return new Response(null, { status: 202 });
  const body = batch ? answers : answers[0];
  return new Response(JSON.stringify(body), {
    status: 200,
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
}

/**
 * Why a body the policy is to decide is not a request it can decide, or undefined: a member
 * name repeated in one object (the gateway would decide the last, a first-wins server run the
 * first), or a request whose `id` is null (its answer cannot be told from an error about no
 * request, and list filtering would not know it) or of another kind than a string or a number.
 */
export function ambiguousRequest(text: string, messages: McpMessage[]): string | undefined {
  const repeated = firstDuplicateName(text);
  if (repeated !== undefined) {
    return `the member ${JSON.stringify(repeated.slice(0, 64))} appears twice in one object`;
  }
  if (messages.some((message) => message.method !== undefined && message.id === null)) {
    return "a request's id must not be null";
  }
  // A lenient MCP server answers `id: true` too, and list filtering knows no such request.
  if (messages.some((message) => message.method !== undefined && message.invalidId)) {
    return "a request's id must be a string or a number";
  }
  return undefined;
}

/** The answer to an ambiguous request: 400, one JSON-RPC `Invalid Request` (id null). */
export function ambiguousRequestResponse(reason: string): Response {
  const body = {
    jsonrpc: "2.0",
    id: null,
    error: { code: INVALID_REQUEST, message: `Invalid Request: ${reason}` },
  };
  return new Response(JSON.stringify(body), {
    status: 400,
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
}

/**
 * The answer to a body that is not JSON while a policy is in force: 400 with a JSON-RPC parse
 * error, as an MCP server answers one. It is not forwarded, since the policy cannot read what it
 * would call (a parser that takes `NaN` could find a refused call in it).
 */
export function unreadableBodyResponse(): Response {
  const body = {
    jsonrpc: "2.0",
    id: null,
    error: { code: PARSE_ERROR, message: "Parse error: MCP_POLICY_FILE decides only JSON" },
  };
  return new Response(JSON.stringify(body), {
    status: 400,
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
}

function refusalMessage(message: McpMessage): string {
  const target = message.subscriptions === undefined ? targetOfCall(message.method) : "resources";
  if (message.policy?.effect !== "deny" || target === undefined) {
    return "Not sent: this batch carries a call that is not allowed for this account";
  }
  return `${TARGET_WORDS[target]} ${JSON.stringify(message.name ?? "")} is not allowed for ` +
    `this account`;
}

/** The decision as the audit line writes it. */
export function auditedDecision(decision: CallDecision | undefined) {
  return decision === undefined ? {} : { policy: decision.effect, policyRule: decision.rule };
}
