/**
 * The MCP server's response on its way back: event streams held while their authorization
 * holds, JSON answers inspected for the audit line, list answers cut to what the account may
 * call.
 */

import { readUpTo, UTF8 } from "../http/bytes.ts";
import { OAuthError } from "../http/errors.ts";
import { type Audit, type AuditContext, isJsonRpcError, sseErrorWatcher } from "./audit.ts";
import type { GatewayRequest } from "./guard.ts";
import {
  DECODED_ENCODINGS,
  type HeaderList,
  type HeaderSnapshot,
  relayedResponseHeaders,
} from "./headers.ts";
import type { McpAnswer, McpBody } from "./mcp_client/types.ts";
import type { McpPost } from "./mcp_message.ts";
import { machineHolder, type OpenStreams } from "./open_streams.ts";
import type { EventIds } from "./event_ids.ts";
import type { Logger } from "../logger.ts";
import { responseWithHeaders } from "../http/responses.ts";
import {
  filterEventStream,
  filterJsonBody,
  type ListRequests,
  type Permits,
  UnfilterableList,
} from "./list_filter.ts";

/**
 * What relaying uses: the open streams, the headers the app puts on every answer, the MCP
 * server's name (its streams end when a reload removes it), what binds a stream's event ids
 * to its session, whether its stream ends at shutdown (`endsAtShutdown`), and where an
 * unexpected failure is told.
 */
export interface Relaying {
  logger: Logger;
  openStreams: Pick<OpenStreams, "hold">;
  headers: HeaderList;
  server: string;
  eventIds: EventIds;
  endsAtShutdown: boolean;
}

/**
 * Whether a request's stream is one an MCP server may hold open for ever, ended at shutdown
 * rather than waited for: a GET's (2025's standalone stream, or one resumed) and a 2026-07-28
 * `subscriptions/listen`'s. A call's stream is left to finish.
 */
export function endsAtShutdown(method: string, post: McpPost | undefined): boolean {
  return method === "GET" ||
    post?.messages.some((m) => m.method === "subscriptions/listen") === true;
}

/** Largest JSON response read whole to tell a JSON-RPC error from a result. */
const MAX_INSPECTED_JSON_BYTES = 1024 * 1024;

/**
 * The MCP server's response, relayed (see `relayAnswer`). A failure is audited once, as the
 * client gets it: one the relay refuses itself (a 502 it has audited) as it is, anything else
 * thrown (an unexpected exception while filtering a hostile answer) as a 502 `bad_gateway`,
 * its cause logged: the MCP server answered, so it is never the service's 500.
 */
export async function relayResponse(
  relaying: Relaying,
  upstream: McpAnswer,
  auth: GatewayRequest,
  auditor: Audit,
  audit: AuditContext,
  filter?: ListFilter,
): Promise<Response> {
  let audited = false;
  const once: Audit = {
    ...auditor,
    record(context, outcome) {
      audited = true;
      auditor.record(context, outcome);
    },
  };
  try {
    return await relayAnswer(relaying, upstream, auth, once, audit, filter);
  } catch (error) {
    if (audited) throw error;
    // Its connection is given up; a body already being read cannot be cancelled (nor needs to be).
    await upstream.cancel().catch(() => {});
    relaying.logger.warn("MCP server's answer not relayed", {
      requestId: audit.requestId,
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    });
    const failure = error instanceof OAuthError
      ? error
      : new OAuthError(502, "bad_gateway", "The MCP server's answer could not be relayed");
    auditor.record(audit, { status: failure.status, error: failure.code });
    throw failure;
  }
}

/**
 * The MCP server's response, relayed. An event stream goes through the open-stream registry
 * (ended when its authorization ends) with `X-Accel-Buffering: no`, its event ids bound to the
 * session; a JSON answer of known size is read whole (one message, useless in part) so its
 * audit line can say whether it was an error; anything else streams as it came.
 */
async function relayAnswer(
  relaying: Relaying,
  upstream: McpAnswer,
  auth: GatewayRequest,
  auditor: Audit,
  audit: AuditContext,
  filter?: ListFilter,
): Promise<Response> {
  const upstreamHeaders = upstream.headers;
  const headers: HeaderList = [
    ...relayedResponseHeaders(upstreamHeaders, upstream.status),
    ...relaying.headers,
  ];
  const init = { status: upstream.status, statusText: upstream.statusText };
  const type = upstreamHeaders["content-type"]?.toLowerCase() ?? "";
  const body = upstream.body;
  if (body && type.startsWith("text/event-stream")) {
    setHeader(headers, "x-accel-buffering", "no");
    const events = clientEvents(relaying, upstream, body, auth, filter);
    if (events === undefined) {
      await upstream.cancel();
      throw unfilterable(auditor, audit);
    }
    const watcher = auditor.enabled ? sseErrorWatcher() : undefined;
    const held = relaying.openStreams.hold(events, {
      sessionId: auth.sessionId,
      machine: machineHolder(auth.machine),
      expiresAtMs: auth.tokenExpiresAtMs,
      server: relaying.server,
      endsAtShutdown: relaying.endsAtShutdown,
    }, {
      see: watcher?.feed,
      finished: () =>
        auditor.record(audit, { status: upstream.status, rpcError: watcher?.sawError() }),
    });
    return responseWithHeaders(held, init, headers);
  }
  // Whatever type a successful answer claims (an MCP server may send JSON as text/plain), a list
  // answer that is not an event stream is read as JSON and filtered, or refused (502), never
  // passed uncut; a failure's own text (a 2025 session's 404) passes as it came. So is a GET's:
  // the SDKs read any successful GET answer as an event stream, whatever its type says.
  const cutting = filter && !filter.learnOnly && (filter.lists.size > 0 || filter.replays);
  if (cutting && body && (upstream.ok || type.startsWith("application/json"))) {
    return await relayFilteredJson(body.stream(), init, headers, auditor, audit, filter);
  }
  const length = Number(upstreamHeaders["content-length"] ?? NaN);
  if (body && type.startsWith("application/json") && length <= MAX_INSPECTED_JSON_BYTES) {
    // An encoded answer's length is the encoded one: decoded, it may be far more.
    const read = upstreamHeaders["content-encoding"] === undefined
      ? await fromAnswer(body.bytes(), auditor, audit)
      : await fromAnswer(readUpTo(body.stream(), MAX_INSPECTED_JSON_BYTES), auditor, audit);
    if (read instanceof Uint8Array) {
      if (filter?.learnOnly) learnListed(read, filter);
      const rpcError = auditor.enabled ? isJsonRpcError(UTF8.decode(read)) : undefined;
      auditor.record(audit, { status: upstream.status, rpcError });
      return responseWithHeaders(read, init, headers);
    }
    auditor.record(audit, { status: upstream.status });
    return responseWithHeaders(read, init, headers);
  }
  auditor.record(audit, { status: upstream.status });
  return responseWithHeaders(body?.stream() ?? null, init, headers);
}

/**
 * An event stream as the client gets it: its lists cut to what the account may call and its
 * event ids bound to the session. One still in an encoding the MCP client does not decode
 * (`deflate`, `zstd`: the MCP server compressed what it was not asked to, or the client's
 * `Accept-Encoding` was passed on) cannot be read: it passes as it came, its ids unbound (a
 * resumption of it is refused), or is undefined when a policy must cut its lists.
 */
function clientEvents(
  relaying: Relaying,
  upstream: McpAnswer,
  body: McpBody,
  auth: GatewayRequest,
  filter: ListFilter | undefined,
): ReadableStream<Uint8Array> | undefined {
  if (stillEncoded(upstream.headers)) {
    return filter && !filter.learnOnly ? undefined : body.stream();
  }
  const events = filter
    ? filterEventStream(body.stream(), filter.lists, filter.permits, {
      keepWhole: filter.learnOnly,
    })
    : body.stream();
  return relaying.eventIds.bind(events, { sessionId: auth.sessionId, server: relaying.server });
}

/** Whether the body is still in the encoding it travelled in (one the MCP client leaves). */
function stillEncoded(headers: HeaderSnapshot): boolean {
  const encoding = headers["content-encoding"]?.trim().toLowerCase();
  return encoding !== undefined && encoding !== "identity" && !DECODED_ENCODINGS.has(encoding);
}

/** 502 for a list answer the gateway cannot read: an unfiltered list must not reach the client. */
function unfilterable(auditor: Audit, audit: AuditContext): OAuthError {
  auditor.record(audit, { status: 502, error: "bad_gateway" });
  return new OAuthError(502, "bad_gateway", "The MCP server's list could not be filtered");
}

/** What a list answer names, told to the filter's `permits` (which learns it); nothing is cut. */
function learnListed(body: Uint8Array, filter: ListFilter): void {
  try {
    filterJsonBody(UTF8.decode(body), filter.lists, filter.permits, { keepWhole: true });
  } catch {
    // Not JSON: nothing listed to learn.
  }
}

/** A read of the answer; one the MCP server breaks off is a 502, not the service's failure. */
async function fromAnswer<T>(reading: Promise<T>, auditor: Audit, audit: AuditContext): Promise<T> {
  try {
    return await reading;
  } catch {
    auditor.record(audit, { status: 502, error: "bad_gateway" });
    throw new OAuthError(502, "bad_gateway", "The MCP server's answer broke off");
  }
}

/**
 * A POST's list requests (none for a GET), and what the account may call: the lists answered
 * are cut to it.
 */
export interface ListFilter {
  lists: ListRequests;
  permits: Permits;
  /**
   * Without a policy: nothing is cut, `permits` only learns what is listed, and a list answer
   * the gateway cannot read passes as it came.
   */
  learnOnly?: boolean;
  /**
   * A GET's: what comes back answers requests it never carried (a stream resumed with
   * `Last-Event-ID` replays a POST's answers), so every list in it is cut, whatever its type.
   */
  replays?: boolean;
}

/** Largest JSON list answer read whole to be filtered; a larger one is refused (502). */
const MAX_FILTERED_JSON_BYTES = 16 * 1024 * 1024;

/**
 * A JSON answer to a POST with a list request, read whole, every list in it cut to what the
 * account may call; one that cannot be read is not relayed (502): an unfiltered list must not
 * reach the client.
 */
async function relayFilteredJson(
  body: ReadableStream<Uint8Array>,
  init: { status: number; statusText: string },
  headers: HeaderList,
  auditor: Audit,
  audit: AuditContext,
  filter: ListFilter,
): Promise<Response> {
  let text: string;
  try {
    const read = await fromAnswer(readUpTo(body, MAX_FILTERED_JSON_BYTES), auditor, audit);
    if (!(read instanceof Uint8Array)) {
      await read.cancel();
      throw new UnfilterableList("the MCP server's list answer is too large to filter");
    }
    // Every list in it, whatever id it came under: a server may answer id "7" as 7.
    text = filterJsonBody(UTF8.decode(read), filter.lists, filter.permits, { anyList: true });
  } catch (error) {
    if (!(error instanceof UnfilterableList)) throw error;
    throw unfilterable(auditor, audit);
  }
  const rpcError = auditor.enabled ? isJsonRpcError(text) : undefined;
  auditor.record(audit, { status: init.status, rpcError });
  const kept = headers.filter(([name]) => name !== "content-length");
  return responseWithHeaders(text, init, kept);
}

function setHeader(headers: [string, string][], name: string, value: string): void {
  const index = headers.findIndex(([present]) => present === name);
  if (index === -1) headers.push([name, value]);
  else headers[index] = [name, value];
}
