/**
 * What an MCP POST carries, as far as the gateway needs to know: its JSON-RPC method, the name
 * it acts on (tool, resource URI, prompt) and its id, read from the body for every revision. For
 * revision 2026-07-28 the request metadata headers (`Mcp-Method`, `Mcp-Name`,
 * `MCP-Protocol-Version`) must agree with the body; a request whose headers are missing or
 * disagree is answered 400 with a JSON-RPC `HeaderMismatch` error here and never reaches the MCP
 * server, so nothing behind us can be told one thing in a header and another in the body.
 *
 * @see MCP spec 2026-07-28 "Streamable HTTP": "Request Metadata", "Value Encoding", "Server
 *   Validation"
 */

import type { CallDecision } from "../access/call_policy.ts";
import type { HeaderSnapshot } from "./headers.ts";
import { UTF8 } from "../http/bytes.ts";

/** The first revision whose requests carry the request metadata headers. */
export const FIRST_HEADER_REVISION = "2026-07-28";
/** JSON-RPC error code of a header that is missing or disagrees with the body. */
export const HEADER_MISMATCH = -32020;

/**
 * The most messages a batch may carry: each is decided, counted and audited on its own, so a
 * 4 MiB body of `{"method":"a"}` would otherwise write 100,000 audit lines.
 */
export const MAX_BATCH_MESSAGES = 100;
/** JSON-RPC's "Invalid Request": what a batch over MAX_BATCH_MESSAGES is answered. */
export const INVALID_REQUEST = -32600;

/** Where a 2026-07-28 request names its revision in the body. */
const PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion";

/** The methods whose `Mcp-Name` mirrors a body field, and which field. */
const NAME_SOURCE: Readonly<Record<string, "name" | "uri">> = {
  "tools/call": "name",
  "prompts/get": "name",
  "resources/read": "uri",
};

const SENTINEL_PREFIX = "=?base64?";
const SENTINEL_SUFFIX = "?=";
/** A header value sent as it is (RFC 9110 field-vchar, space and tab; no obs-text). */
const PLAIN_VALUE = /^[\t\x20-\x7e]*$/;
/** RFC 4648 §4 with its padding, as the MCP SDKs decode. */
const CANONICAL_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** One JSON-RPC message of a POST, as the audit line and the span describe it. */
export interface McpMessage {
  /** Absent for a response sent by the client (earlier revisions). */
  method?: string;
  /** The tool name, resource URI or prompt name. */
  name?: string;
  /** The JSON-RPC id; absent for a notification. */
  id?: string | number | null;
  /** An `id` that is there but is no string, number or null, the only ids JSON-RPC has. */
  invalidId?: true;
  /** MCP_POLICY_FILE's decision, for a call it decided. */
  policy?: CallDecision;
  /**
   * A 2026-07-28 `subscriptions/listen`'s `notifications.resourceSubscriptions`, as sent (an
   * array of URIs, when well formed): each is decided as a read.
   */
  subscriptions?: unknown;
}

/** What the gateway learnt of a POST body. */
export interface McpPost {
  /** The messages in the body (several in a batch, none when it is not JSON-RPC). */
  messages: McpMessage[];
  /** The protocol revision: the header's, else the body's. */
  protocolVersion?: string;
  /** Why the headers are refused, if they are. */
  mismatch?: string;
  /** Whether the body is a JSON array: a batch (revisions before 2026-07-28). */
  batch: boolean;
  /** A batch of more than MAX_BATCH_MESSAGES messages: its size (none of it is described). */
  oversized?: number;
  /**
   * A body that is not JSON to us: nothing in it can be checked or decided, though a more
   * lenient parser behind us (one taking `NaN`) might still find a call in it.
   */
  unreadable?: true;
}

/** The request metadata headers of a POST. */
export interface MetadataHeaders {
  protocolVersion: string | null;
  method: string | null;
  name: string | null;
}

/** The metadata headers of `headers`. */
export function metadataHeaders(headers: HeaderSnapshot): MetadataHeaders {
  return {
    protocolVersion: headers["mcp-protocol-version"] ?? null,
    method: headers["mcp-method"] ?? null,
    name: headers["mcp-name"] ?? null,
  };
}

/** Reads a POST's body (already within the size limit) and checks its headers against it. */
export function inspectPost(body: Uint8Array, headers: MetadataHeaders): McpPost {
  const parsed = parseJson(body);
  if (parsed === UNREADABLE) {
    return {
      messages: [],
      protocolVersion: headers.protocolVersion ?? undefined,
      batch: false,
      unreadable: true,
    };
  }
  if (Array.isArray(parsed) && parsed.length > MAX_BATCH_MESSAGES) {
    return {
      messages: [],
      protocolVersion: headers.protocolVersion ?? undefined,
      batch: true,
      oversized: parsed.length,
    };
  }
  if (Array.isArray(parsed)) {
    // Batches exist only before 2026-07-28: carried as today, described message by message.
    return {
      messages: parsed.map((message) => describe(message)),
      protocolVersion: headers.protocolVersion ?? undefined,
      mismatch: batchMismatch(parsed, headers),
      batch: true,
    };
  }
  if (!isObject(parsed)) {
    return { messages: [], protocolVersion: headers.protocolVersion ?? undefined, batch: false };
  }
  const message = describe(parsed);
  const claimed = claimedRevision(parsed);
  return {
    messages: [message],
    protocolVersion: headers.protocolVersion ?? claimed,
    mismatch: headerMismatch(parsed, message, claimed, headers),
    batch: false,
  };
}

/**
 * Why a batch's headers are refused: no revision with batches sends request metadata headers,
 * and 2026-07-28 takes one message per POST, so a batch with either would tell whatever reads
 * the headers one thing and the body another.
 */
function batchMismatch(batch: unknown[], headers: MetadataHeaders): string | undefined {
  if (headers.method !== null || headers.name !== null) {
    return "a batch cannot carry the Mcp-Method or Mcp-Name header";
  }
  const modern = hasRequestHeaders(headers.protocolVersion ?? undefined) ||
    batch.some((message) => isObject(message) && hasRequestHeaders(claimedRevision(message)));
  return modern
    ? "revision 2026-07-28 takes one JSON-RPC message per POST, not a batch"
    : undefined;
}

/** The JSON-RPC error body of a refused request: 400, `HeaderMismatch`. */
export function headerMismatchResponse(id: McpMessage["id"], reason: string): Response {
  const body = {
    jsonrpc: "2.0",
    id: id ?? null,
    error: { code: HEADER_MISMATCH, message: `Header mismatch: ${reason}` },
  };
  return new Response(JSON.stringify(body), {
    status: 400,
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
}

/** The answer to a batch over MAX_BATCH_MESSAGES: 400, one JSON-RPC `Invalid Request`. */
export function oversizedBatchResponse(size: number): Response {
  const body = {
    jsonrpc: "2.0",
    id: null,
    error: {
      code: INVALID_REQUEST,
      message:
        `Invalid Request: a batch carries at most ${MAX_BATCH_MESSAGES} messages, not ${size}`,
    },
  };
  return new Response(JSON.stringify(body), {
    status: 400,
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
}

/** Whether `version` is a revision with request metadata headers (dates compare as text). */
function hasRequestHeaders(version: string | undefined): boolean {
  return version !== undefined && version >= FIRST_HEADER_REVISION;
}

/** What parseJson answers for a body that is not JSON. */
const UNREADABLE = Symbol("unreadable");

/** The body's JSON (undefined when empty), or UNREADABLE. */
function parseJson(body: Uint8Array): unknown {
  if (body.byteLength === 0) return undefined;
  try {
    return JSON.parse(UTF8.decode(body));
  } catch {
    // Not JSON: without a policy the MCP server answers it as it would (a parse error).
    return UNREADABLE;
  }
}

function describe(message: unknown): McpMessage {
  if (!isObject(message)) return {};
  const { method, id } = message;
  const described: McpMessage = {};
  if (typeof method === "string") {
    described.method = method;
    const name = nameOf(message, method);
    if (name !== undefined) described.name = name;
    const subscriptions = subscriptionsOf(message, method);
    if (subscriptions !== undefined) described.subscriptions = subscriptions;
  }
  if (typeof id === "string" || typeof id === "number" || id === null) described.id = id;
  else if (Object.hasOwn(message, "id")) described.invalidId = true;
  return described;
}

/** The methods that name what they act on, and which field: the header's, and subscriptions. */
const NAMED_BY: Readonly<Record<string, "name" | "uri">> = {
  ...NAME_SOURCE,
  "resources/subscribe": "uri",
};

/** A `subscriptions/listen`'s resource URIs, as sent; undefined when it asks for none. */
function subscriptionsOf(message: Record<string, unknown>, method: string): unknown {
  if (method !== "subscriptions/listen" || !isObject(message.params)) return undefined;
  const notifications = message.params.notifications;
  return isObject(notifications) ? notifications.resourceSubscriptions : undefined;
}

function nameOf(message: Record<string, unknown>, method: string): string | undefined {
  const field = Object.hasOwn(NAMED_BY, method) ? NAMED_BY[method] : undefined;
  if (field === undefined || !isObject(message.params)) return undefined;
  const value = message.params[field];
  return typeof value === "string" ? value : undefined;
}

/** The revision the body names in `params._meta`, when it names one. */
function claimedRevision(message: Record<string, unknown>): string | undefined {
  const params = message.params;
  if (!isObject(params) || !isObject(params._meta)) return undefined;
  const version = params._meta[PROTOCOL_VERSION_META_KEY];
  return typeof version === "string" ? version : undefined;
}

/**
 * Why the headers do not go with the body, or undefined when they do. Headers that are present
 * must agree with the body in every revision (no earlier client sends them); a 2026-07-28
 * request must also carry the ones its method requires.
 */
function headerMismatch(
  body: Record<string, unknown>,
  message: McpMessage,
  claimed: string | undefined,
  headers: MetadataHeaders,
): string | undefined {
  const method = message.method;
  if (method === undefined) return undefined;
  if (headers.protocolVersion !== null && claimed !== undefined) {
    if (headers.protocolVersion !== claimed) {
      return `the MCP-Protocol-Version header names ${headers.protocolVersion} but the body ${claimed}`;
    }
  }
  const isRequest = Object.hasOwn(body, "id");
  const modern = hasRequestHeaders(headers.protocolVersion ?? claimed);
  if (modern && isRequest && headers.protocolVersion === null) {
    return "the required MCP-Protocol-Version header is absent";
  }
  if (headers.method === null) {
    if (modern && isRequest) return "the required Mcp-Method header is absent";
  } else if (headers.method !== method) {
    return `the Mcp-Method header names ${headers.method} but the body ${method}`;
  }
  const field = Object.hasOwn(NAME_SOURCE, method) ? NAME_SOURCE[method] : undefined;
  // A stray Mcp-Name on a method without a name mirrors nothing (the SDKs ignore it too).
  if (field === undefined) return undefined;
  if (headers.name === null) {
    return modern && isRequest && message.name !== undefined
      ? "the required Mcp-Name header is absent"
      : undefined;
  }
  const named = decodeSentinel(headers.name);
  if (named === undefined) return "the Mcp-Name header carries an invalid value";
  // A name in the header only: whatever reads the header would act on what the body does not say.
  if (message.name === undefined) return `the Mcp-Name header is set but params.${field} is not`;
  if (named !== message.name) {
    return `the Mcp-Name header does not match params.${field}`;
  }
  return undefined;
}

/**
 * A header value with its `=?base64?…?=` form decoded; undefined when that form is broken, or
 * when a plain value holds what only the Base64 form may carry (anything but visible ASCII,
 * space and tab: a client must encode it).
 */
export function decodeSentinel(value: string): string | undefined {
  if (!value.startsWith(SENTINEL_PREFIX) || !value.endsWith(SENTINEL_SUFFIX)) {
    return PLAIN_VALUE.test(value) ? value : undefined;
  }
  const encoded = value.slice(SENTINEL_PREFIX.length, value.length - SENTINEL_SUFFIX.length);
  if (!CANONICAL_BASE64.test(encoded)) return undefined;
  try {
    const binary = atob(encoded);
    const bytes = Uint8Array.from(binary, (char) => char.charCodeAt(0));
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
