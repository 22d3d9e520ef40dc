/**
 * The gateway's audit of what crosses it: one log line per MCP message (`"message":"mcp"`), with
 * who sent it, what it called and how it ended, and the same fields on the request's
 * OpenTelemetry span. Never arguments, results or tokens: the name of a tool, resource or prompt
 * is the most of a message that is written down, and no more than AUDITED_CHARS of it.
 */

import { sha256Hex } from "../crypto.ts";
import type { Logger } from "../logger.ts";
import { setSpanAttributes } from "../http/telemetry.ts";
import type { GatewayRequest } from "./guard.ts";
import type { McpMessage } from "./mcp_message.ts";
import { auditedDecision } from "./call_check.ts";

/**
 * The most characters of a client's string (method, name, id, revision, MCP session id) an audit
 * line or a span carries; a longer one is cut there and followed by `…sha256:` and the first 16
 * hex digits of its whole value's SHA-256, so one request cannot write megabytes to the log and
 * two long values can still be told apart.
 */
export const AUDITED_CHARS = 256;

/** What one request's audit lines share. */
export interface AuditContext {
  requestId: string;
  auth: GatewayRequest;
  /** The 2025 `Mcp-Session-Id`, when the client sent one. */
  mcpSessionId: string | null;
  protocolVersion?: string;
  messages: McpMessage[];
  /** `performance.now()` when the request arrived. */
  startedMs: number;
  /** The size of a batch refused for having more than MAX_BATCH_MESSAGES messages. */
  batchSize?: number;
}

/** What the audit knows of a request refused before it was authenticated. */
export interface UnauthenticatedContext {
  requestId: string;
  startedMs: number;
  protocolVersion?: string;
}

/** How the exchange ended, as far as the audit says. */
export interface AuditOutcome {
  status: number;
  /** Whether the MCP server answered a JSON-RPC error; undefined when not known. */
  rpcError?: boolean;
  /** The OAuth error code of a refusal by the gateway (`invalid_token`, …), when it has one. */
  error?: string;
}

/** Writes the audit lines of an exchange; `enabled` false writes none. */
export interface Audit {
  readonly enabled: boolean;
  /** The request's fields on its span, before the MCP server is asked. */
  annotate(context: AuditContext): void;
  /** One line per message of the request. */
  record(context: AuditContext, outcome: AuditOutcome): void;
  /** One line for a request refused before anyone was authenticated (a 401, 403 or 503). */
  recordUnauthenticated(context: UnauthenticatedContext, outcome: AuditOutcome): void;
}

/** The audit over `logger` of the MCP server named `server` (`default` for `/mcp`). */
export function createAudit(logger: Logger, enabled: boolean, server: string): Audit {
  return {
    enabled,
    annotate(context) {
      setSpanAttributes(() => {
        const [first] = context.messages;
        return {
          "enduser.id": context.auth.user.id,
          "gitlab.username": context.auth.user.username,
          "oauth.client.id": context.auth.clientId,
          "session.id": context.auth.sessionId,
          "mcp.session.id": bounded(context.mcpSessionId ?? undefined),
          "mcp.protocol.version": bounded(context.protocolVersion),
          "mcp.method.name": bounded(first?.method),
          "mcp.name": bounded(first?.name),
          "jsonrpc.request.id": first?.id === undefined || first.id === null
            ? undefined
            : bounded(String(first.id)),
        };
      });
    },
    record(context, outcome) {
      const ms = elapsedMs(context.startedMs);
      setOutcomeAttributes(outcome);
      if (!enabled) return;
      const messages: McpMessage[] = context.messages.length > 0 ? context.messages : [{}];
      const mcpSessionId = bounded(context.mcpSessionId ?? undefined);
      const protocolVersion = bounded(context.protocolVersion);
      for (const message of messages) {
        logger.info("mcp", {
          requestId: context.requestId,
          server,
          ...callerFields(context.auth),
          userId: context.auth.user.id,
          username: context.auth.user.username,
          clientId: context.auth.clientId,
          sessionId: context.auth.sessionId,
          mcpSessionId,
          protocolVersion,
          method: bounded(message.method),
          name: bounded(message.name),
          rpcId: typeof message.id === "string" ? bounded(message.id) : message.id ?? undefined,
          batchSize: context.batchSize,
          status: outcome.status,
          rpcError: outcome.rpcError,
          error: outcome.error,
          ...auditedDecision(message.policy),
          ms,
        });
      }
    },
    recordUnauthenticated(context, outcome) {
      setOutcomeAttributes(outcome);
      if (!enabled) return;
      logger.info("mcp", {
        requestId: context.requestId,
        server,
        protocolVersion: bounded(context.protocolVersion),
        status: outcome.status,
        error: outcome.error,
        ms: elapsedMs(context.startedMs),
      });
    },
  };
}

/**
 * Who called, by kind (`user`, `ci`, `client`), and for a CI job its project (path and id), pipeline and job
 * (bounded: they come from GitLab's ID token).
 */
function callerFields(auth: GatewayRequest) {
  const { machine } = auth;
  if (!machine) return { caller: "user" };
  return {
    caller: machine.kind,
    ciProject: bounded(machine.ci?.project_path),
    // The path can be renamed and taken by another project; the id cannot.
    ciProjectId: bounded(machine.ci?.project_id),
    ciPipeline: bounded(machine.ci?.pipeline),
    ciJob: bounded(machine.ci?.job),
  };
}

/**
 * `value` as an audit line or a span carries it: as it is up to AUDITED_CHARS characters, else
 * cut there (never inside a surrogate pair) and followed by `…sha256:<16 hex>` of the whole.
 */
export function bounded(value: string | undefined): string | undefined {
  if (value === undefined || value.length <= AUDITED_CHARS) return value;
  const cut = isHighSurrogate(value.charCodeAt(AUDITED_CHARS - 1))
    ? AUDITED_CHARS - 1
    : AUDITED_CHARS;
  return `${value.slice(0, cut)}…sha256:${sha256Hex(value).slice(0, 16)}`;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

function setOutcomeAttributes(outcome: AuditOutcome): void {
  setSpanAttributes(() => ({
    "http.response.status_code": outcome.status,
    "mcp.rpc_error": outcome.rpcError,
  }));
}

function elapsedMs(startedMs: number): number {
  return Math.round((performance.now() - startedMs) * 10) / 10;
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
