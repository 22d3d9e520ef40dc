/**
 * How the MCP server's list answers are read on their way back, and which tool names earn a
 * metrics label of their own: those an MCP server listed and those a policy rule names, never
 * what a caller sends (issue 33 §1.6).
 */

import type { CallPolicy, Target } from "../access/call_policy.ts";
import type { Decide } from "../machine/decide.ts";
import type { Gateway } from "./deps.ts";
import { listRequestsOf } from "./list_filter.ts";
import type { McpMessage } from "./mcp_message.ts";
import type { ListFilter } from "./relay.ts";

/**
 * How the answer's lists are read: with a policy (or a machine caller's tool limits) every event stream is filtered, a GET's (and its
 * replays) too; without one, the answer to a `tools/list` is only read for the names it lists.
 * Either way a listed tool earns its own metrics label. `messages` is undefined when the request
 * had no body to read (a GET): what comes back answers requests it never carried.
 */
export function answerListFilter(
  gateway: Gateway,
  decide: Decide | undefined,
  messages: readonly McpMessage[] | undefined,
): ListFilter | undefined {
  const lists = listRequestsOf([...messages ?? []]);
  const { gatewayMessages } = gateway.deps.metrics;
  const learn = (target: Target, name: string) => {
    if (target === "tools") gatewayMessages.learnTool(name);
  };
  if (decide) {
    return {
      lists,
      permits: (target, name) => {
        learn(target, name);
        return decide(target, name).effect === "allow";
      },
      replays: messages === undefined,
    };
  }
  if (![...lists.values()].some((list) => list.target === "tools")) return undefined;
  return {
    lists,
    permits: (target, name) => {
      learn(target, name);
      return true;
    },
    learnOnly: true,
  };
}

/** The tool names a policy's rules write literally: each earns its own metrics label. */
export function learnPolicyTools(gateway: Gateway, policy: CallPolicy): void {
  if (gateway.toolsLearntFrom === policy) return;
  gateway.toolsLearntFrom = policy;
  for (const rule of policy.rules) {
    if (rule.target !== "tools") continue;
    for (const pattern of rule.patterns) {
      if (!pattern.includes("*")) gateway.deps.metrics.gatewayMessages.learnTool(pattern);
    }
  }
}
