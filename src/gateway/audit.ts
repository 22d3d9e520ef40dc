/**
 * The gateway's audit of what crosses it: one log line per MCP message (`"msg":"mcp"`), with who
 * sent it, what it called and how it ended, and the same fields on the request's OpenTelemetry
 * span. Never arguments, results or tokens: the name of a tool, resource or prompt is the most
 * of a message that is written down.
 */

import type { Logger } from "../logger.ts";
import { setSpanAttributes } from "../http/telemetry.ts";
import type { AuthenticatedRequest } from "./guard.ts";
import type { McpMessage } from "./mcp_message.ts";
import { auditedDecision } from "./call_check.ts";

/** What one request's audit lines share. */
export interface AuditContext {
  requestId: string;
  auth: AuthenticatedRequest;
  /** The 2025 `Mcp-Session-Id`, when the client sent one. */
  mcpSessionId: string | null;
  protocolVersion?: string;
  messages: McpMessage[];
  /** `performance.now()` when the request arrived. */
  startedMs: number;
}

/** How the exchange ended, as far as the audit says. */
export interface AuditOutcome {
  status: number;
  /** Whether the MCP server answered a JSON-RPC error; undefined when not known. */
  rpcError?: boolean;
}

/** Writes the audit lines of an exchange; `enabled` false writes none. */
export interface Audit {
  readonly enabled: boolean;
  /** The request's fields on its span, before the MCP server is asked. */
  annotate(context: AuditContext): void;
  /** One line per message of the request. */
  record(context: AuditContext, outcome: AuditOutcome): void;
}

/** The audit over `logger`. */
export function createAudit(logger: Logger, enabled: boolean): Audit {
  return {
    enabled,
    annotate(context) {
      setSpanAttributes(() => {
        const [first] = context.messages;
        return {
          "enduser.id": String(context.auth.user.id),
          "gitlab.username": context.auth.user.username,
          "oauth.client.id": context.auth.clientId,
          "session.id": context.auth.sessionId,
          "mcp.session.id": context.mcpSessionId ?? undefined,
          "mcp.protocol.version": context.protocolVersion,
          "mcp.method.name": first?.method,
          "mcp.name": first?.name,
          "jsonrpc.request.id": first?.id === undefined || first.id === null
            ? undefined
            : String(first.id),
        };
      });
    },
    record(context, outcome) {
      const ms = Math.round((performance.now() - context.startedMs) * 10) / 10;
      setSpanAttributes(() => ({
        "http.response.status_code": outcome.status,
        "mcp.rpc_error": outcome.rpcError,
      }));
      if (!enabled) return;
      const messages: McpMessage[] = context.messages.length > 0 ? context.messages : [{}];
      for (const message of messages) {
        logger.info("mcp", {
          msg: "mcp",
          requestId: context.requestId,
          userId: context.auth.user.id,
          username: context.auth.user.username,
          clientId: context.auth.clientId,
          sessionId: context.auth.sessionId,
          mcpSessionId: context.mcpSessionId ?? undefined,
          protocolVersion: context.protocolVersion,
          method: message.method,
          name: message.name,
          rpcId: message.id === undefined || message.id === null ? undefined : message.id,
          status: outcome.status,
          rpcError: outcome.rpcError,
          ...auditedDecision(message.policy),
          ms,
        });
      }
    },
  };
}

/**
 * Whether a JSON body is a JSON-RPC error response. Parsed only when it mentions `"error"`, so a
 * plain result costs a scan, not a parse.
 */
export function isJsonRpcError(text: string): boolean {
  if (!text.includes('"error"')) return false;
  try {
    const parsed: unknown = JSON.parse(text);
    const messages = Array.isArray(parsed) ? parsed : [parsed];
    return messages.some((message) =>
      typeof message === "object" && message !== null && "error" in message &&
      !("method" in message)
    );
  } catch {
    return false;
  }
}

/** An event not mentioning `"error"` is held no longer than this while its end is awaited. */
const QUIET_EVENT_CHARS = 64 * 1024;
/** Largest event held to be looked at; a larger one goes unread (it is relayed all the same). */
const MAX_WATCHED_EVENT_CHARS = 1024 * 1024;

/**
 * Watches an event stream's bytes for a JSON-RPC error response among its events, holding at
 * most the event being read (up to MAX_WATCHED_EVENT_CHARS), and looking at each byte a bounded
 * number of times: a stream of any size costs time in proportion to it.
 */
export function sseErrorWatcher(): { feed(chunk: Uint8Array): void; sawError(): boolean } {
  const decoder = new TextDecoder();
  const boundary = /\r?\n\r?\n/g;
  /** The event being read; while `skipping`, only the last characters (a boundary may straddle). */
  let pending = "";
  let mentionsError = false;
  /** In an event too large to hold: waiting for its end. */
  let skipping = false;
  let sawError = false;
  const endAfter = (from: number) => {
    boundary.lastIndex = from;
    return boundary.exec(pending);
  };
  return {
    feed(chunk) {
      if (sawError) return;
      // The new text, and the three characters before it a boundary could begin with.
      const from = Math.max(0, pending.length - 3);
      pending += decoder.decode(chunk, { stream: true });
      let start = 0;
      for (let end = endAfter(from); end !== null; end = endAfter(start)) {
        const event = pending.slice(start, end.index);
        if (!skipping && event.includes('"error"') && isJsonRpcError(eventData(event))) {
          sawError = true;
          pending = "";
          return;
        }
        skipping = false;
        start = end.index + end[0].length;
      }
      pending = pending.slice(start);
      if (skipping) {
        pending = pending.slice(-3);
        return;
      }
      mentionsError = start > 0
        ? pending.includes('"error"')
        : mentionsError || pending.includes('"error"', Math.max(0, from - 6));
      if (pending.length > (mentionsError ? MAX_WATCHED_EVENT_CHARS : QUIET_EVENT_CHARS)) {
        skipping = true;
        mentionsError = false;
        pending = pending.slice(-3);
      }
    },
    sawError: () => sawError,
  };
}

function eventData(event: string): string {
  return event.split(/\r?\n/).filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5)).join("\n");
}
