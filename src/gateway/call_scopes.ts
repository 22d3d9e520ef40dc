/**
 * The scopes a request through the gateway needs, call by call: what reads or watches resources
 * needs `mcp:resources`, everything else (tools, prompts, the protocol's own messages, a GET's
 * stream) `mcp:tools`. A token lacking one is answered 403 `insufficient_scope` naming only the
 * scopes this request needs and the token lacks, never every scope the service knows: a client
 * asks for the union of what it holds and what the challenge names (MCP 2026-07-28, SEP-2350).
 *
 * @see RFC 6750 §3.1, MCP authorization "Runtime insufficient scope errors"
 */

import { GRANTED_SCOPES, MCP_TOOLS_SCOPE } from "../scopes.ts";
import type { McpMessage } from "./mcp_message.ts";

/** The scope of resources (the second the service grants). */
const MCP_RESOURCES_SCOPE = GRANTED_SCOPES[1];

/** The scope one message needs. */
function scopeOf(message: McpMessage): string {
  const method = message.method ?? "";
  return method.startsWith("resources/") || method.startsWith("notifications/resources/")
    ? MCP_RESOURCES_SCOPE
    : MCP_TOOLS_SCOPE;
}

/** The scopes the request's messages need that `granted` lacks, in a stable order. */
export function missingScopes(
  messages: readonly McpMessage[],
  granted: readonly string[],
): string[] {
  const needed = messages.length === 0 ? [MCP_TOOLS_SCOPE] : messages.map(scopeOf);
  return [...new Set(needed)].filter((scope) => !granted.includes(scope)).sort();
}
