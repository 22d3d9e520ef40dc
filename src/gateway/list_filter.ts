/**
 * The MCP server's answers to `tools/list`, `resources/list` and `prompts/list`, cut down to what
 * the account may call, as JSON or inside an event stream's events. A JSON answer to a POST
 * with a list request has every list in it cut, whatever id it came under. In an event stream, POST or GET, every
 * response whose result carries a list (`tools`, `resources`, `prompts`) is cut, whatever it
 * answers: a GET resumed with `Last-Event-ID` replays earlier streams' answers, whose requests
 * this request never saw. Every other event goes through byte for byte.
 * `resources/templates/list` is left alone: a template is not a URI a pattern can be matched
 * against, and reading through one is checked as `resources/read` of the URI it makes.
 */

import type { Target } from "../access/call_policy.ts";
import type { McpMessage } from "./mcp_message.ts";

/** The list methods, what they list, and the field naming each item. */
const LISTS: Readonly<Record<string, { target: Target; field: string; item: string }>> = {
  "tools/list": { target: "tools", field: "tools", item: "name" },
  "resources/list": { target: "resources", field: "resources", item: "uri" },
  "prompts/list": { target: "prompts", field: "prompts", item: "name" },
};

/** Whether the account may call `name` of `target`. */
export type Permits = (target: Target, name: string) => boolean;

/** The list requests of a POST: JSON-RPC id (as JSON text) to the method's list. */
export type ListRequests = Map<string, typeof LISTS[string]>;

/** Thrown when a list the MCP server answered cannot be read, so cannot be filtered. */
export class UnfilterableList extends Error {
  override name = "UnfilterableList";
}

/** The list requests among `messages`; empty when there are none. */
export function listRequestsOf(messages: McpMessage[]): ListRequests {
  const requests: ListRequests = new Map();
  for (const { method, id } of messages) {
    if (method === undefined || id === undefined || id === null) continue;
    if (Object.hasOwn(LISTS, method)) requests.set(JSON.stringify(id), LISTS[method]);
  }
  return requests;
}

/** How a list is filtered. */
export interface FilterOptions {
  /** Every result carrying a list, not only the answers to `lists` (event streams). */
  anyList?: boolean;
  /**
   * A list every item of which is permitted is left as it came (when only learning what is
   * listed, without a policy); a cut list always says it is this account's.
   */
  keepWhole?: boolean;
}

/**
 * A JSON body (one message or a batch) with the list results filtered; the text unchanged when
 * it holds none. Throws UnfilterableList when it is not JSON.
 */
export function filterJsonBody(
  text: string,
  lists: ListRequests,
  permits: Permits,
  options: FilterOptions = {},
): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new UnfilterableList("the MCP server's list answer is not JSON");
  }
  const messages = Array.isArray(parsed) ? parsed : [parsed];
  const changed = messages.map((message) => filterMessage(message, lists, permits, options));
  if (!changed.some((message, i) => message !== messages[i])) return text;
  return JSON.stringify(Array.isArray(parsed) ? changed : changed[0]);
}

/**
 * A message with its list results filtered when it answers one of `lists`, or (`anyList`) when
 * its result carries a list of any kind; else itself. Every list the result carries is cut, not
 * only the one its request asked for: a batch may give two list requests one id (`tools/list`
 * and `prompts/list`, both `id: 1`), and the id then names only one of them.
 */
function filterMessage(
  message: unknown,
  lists: ListRequests,
  permits: Permits,
  { anyList = false, keepWhole = false }: FilterOptions,
): unknown {
  if (typeof message !== "object" || message === null || !("id" in message)) return message;
  if (!("result" in message)) return message;
  const result = message.result as Record<string, unknown>;
  if (typeof result !== "object" || result === null) return message;
  if (!anyList && !lists.has(JSON.stringify(message.id))) return message;
  const carried = listsIn(result);
  if (carried.length === 0) return message;
  const filtered: Record<string, unknown> = { ...result };
  let cut = false;
  for (const list of carried) {
    const items = result[list.field] as unknown[];
    const kept = items.filter((item) => {
      const name = typeof item === "object" && item !== null
        ? (item as Record<string, unknown>)[list.item]
        : undefined;
      // An item without a name cannot be checked: it is not shown.
      return typeof name === "string" && permits(list.target, name);
    });
    if (kept.length !== items.length) cut = true;
    filtered[list.field] = kept;
  }
  if (keepWhole && !cut) return message;
  // The list is this account's (2026-07-28 caching): a shared cache must not serve it to another.
  if ("cacheScope" in result) filtered.cacheScope = "private";
  return { ...message, result: filtered };
}

/** The lists a result carries, whatever request it answers. */
function listsIn(result: Record<string, unknown>): typeof LISTS[string][] {
  return Object.values(LISTS).filter((list) => Array.isArray(result[list.field]));
}

/** Largest event held whole while looking for a list answer. */
const MAX_EVENT_CHARS = 16 * 1024 * 1024;

/**
 * An event stream whose events answering one of `lists` carry the filtered result; every other
 * event, and the stream's line endings, pass as they came. Events are told apart as an SSE
 * parser (WHATWG HTML, the MCP SDKs' `eventsource-parser`) tells them: a line ends at CRLF, LF or
 * a lone CR, however they mix and wherever a chunk cuts them, and an empty line ends the event.
 */
export function filterEventStream(
  body: ReadableStream<Uint8Array>,
  lists: ListRequests,
  permits: Permits,
  options: FilterOptions = {},
): ReadableStream<Uint8Array> {
  const eventOptions = { ...options, anyList: true };
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  const lineEnd = /[\r\n]/g;
  let pending = "";
  /** Where the line being read begins in `pending`. */
  let lineStart = 0;
  /** Where its end may be: what was searched before holds none. */
  let searchFrom = 0;
  /** Past an event too large to hold, when only learning: every chunk passes as it came. */
  let passing = false;
  const flushEvents = (controller: TransformStreamDefaultController<Uint8Array>, last: boolean) => {
    let start = 0;
    lineEnd.lastIndex = searchFrom;
    for (let match = lineEnd.exec(pending); match !== null; match = lineEnd.exec(pending)) {
      const end = match.index;
      // A CR that ends the text so far may be the first half of a CRLF.
      if (pending[end] === "\r" && end === pending.length - 1 && !last) break;
      const next = end + (pending.startsWith("\r\n", end) ? 2 : 1);
      if (end === lineStart) {
        // An empty line: the event ends with it.
        const event = pending.slice(start, next);
        controller.enqueue(encoder.encode(filterEvent(event, lists, permits, eventOptions)));
        start = next;
      }
      lineStart = lineEnd.lastIndex = next;
    }
    pending = pending.slice(start);
    lineStart -= start;
    searchFrom = Math.max(lineStart, pending.length - 1);
    if (pending.length > MAX_EVENT_CHARS) {
      if (!options.keepWhole) {
        throw new UnfilterableList("an event of the MCP server's stream is too large to filter");
      }
      // Only learning what is listed: the rest of the stream passes as it comes.
      controller.enqueue(encoder.encode(pending));
      pending = "";
      passing = true;
    }
  };
  return body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        if (passing) return controller.enqueue(chunk);
        pending += decoder.decode(chunk, { stream: true });
        flushEvents(controller, false);
      },
      flush(controller) {
        if (passing) return;
        pending += decoder.decode();
        flushEvents(controller, true);
        if (pending !== "") {
          controller.enqueue(encoder.encode(filterEvent(pending, lists, permits, eventOptions)));
        }
      },
    }),
  );
}

/** One event (with its terminating blank line), its data filtered when it answers a list. */
function filterEvent(
  event: string,
  lists: ListRequests,
  permits: Permits,
  options: FilterOptions,
): string {
  const lines = event.split(/\r\n|\n|\r/);
  const data = lines.filter((line) => line.startsWith("data:"));
  if (data.length === 0) return event;
  const text = data.map((line) => line.slice(line.startsWith("data: ") ? 6 : 5)).join("\n");
  let filtered: string;
  try {
    filtered = filterJsonBody(text, lists, permits, options);
  } catch {
    // Not JSON: no list answer a client could read.
    return event;
  }
  if (filtered === text) return event;
  const others = lines.filter((line) => line !== "" && !line.startsWith("data:"));
  return [...others, `data: ${filtered}`].join("\n") + "\n\n";
}
