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

/**
 * Watches an event stream's bytes for a JSON-RPC error response among its events, without
 * holding more than the event being read.
 */
export function sseErrorWatcher(): { feed(chunk: Uint8Array): void; sawError(): boolean } {
  const decoder = new TextDecoder();
  let pending = "";
  let sawError = false;
  return {
    feed(chunk) {
      if (sawError) return;
      pending += decoder.decode(chunk, { stream: true });
      // Only events that mention an error are parsed; the rest are dropped as they complete.
      let boundary = pending.search(/\r?\n\r?\n/);
      while (boundary !== -1) {
        const event = pending.slice(0, boundary);
        pending = pending.slice(boundary).replace(/^\r?\n\r?\n/, "");
        if (event.includes('"error"') && isJsonRpcError(eventData(event))) sawError = true;
        boundary = pending.search(/\r?\n\r?\n/);
      }
      if (!pending.includes('"error"') && pending.length > 64 * 1024) pending = "";
    },
    sawError: () => sawError,
  };
}

function eventData(event: string): string {
  return event.split(/\r?\n/).filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5)).join("\n");
}
