/**
 * Event ids bound to the session they were relayed to. An MCP server may put an `id` on its
 * events, and a client resumes a broken stream with a GET carrying the last one as
 * `Last-Event-ID`; a server without sessions (or with an event store shared across them) replays
 * to whoever presents an id, and the spec asks ids to be unique, not secret. So every id reaches
 * the client with a MAC of our session, the MCP server and the id appended, and a
 * `Last-Event-ID` is forwarded (without it) only from the session it was relayed to: another
 * user's id, or a made-up one, never reaches the MCP server (as with `Mcp-Session-Id`).
 *
 * @see MCP spec "Streamable HTTP", "Resumability and Redelivery"; WHATWG HTML "server-sent events"
 */

import { hkdfSync } from "node:crypto";
import { hmacSha256Base64Url, timingSafeEqual } from "../crypto.ts";
import { OAuthError } from "../http/errors.ts";

const HKDF_SALT = "gitlab-mcp-auth gateway";
const HKDF_INFO = "event id v1";
/** The MAC's length: 128 bits of base64url. */
const TAG_CHARS = 22;
/** Between the MCP server's id and the MAC (never in a base64url MAC, so the last one splits). */
const SEPARATOR = "~";
/** Longest id line held to be tagged; a longer one passes as it came (its resumption fails). */
const MAX_ID_LINE_CHARS = 64 * 1024;

/** Whom an id is bound to. */
export interface EventIdBinding {
  /** Our session the stream was relayed to. */
  sessionId: string;
  /** The MCP server it came from (`default` for `/mcp`). */
  server: string;
}

/** Binds event ids on the way out, and reads them back from `Last-Event-ID`. */
export interface EventIds {
  /** `body` (an event stream) with every event id bound to `binding`. */
  bind(body: ReadableStream<Uint8Array>, binding: EventIdBinding): ReadableStream<Uint8Array>;
  /** The MCP server's id in `lastEventId`; undefined when it was not bound to `binding`. */
  unbind(lastEventId: string, binding: EventIdBinding): string | undefined;
}

/** Event ids bound with keys derived (HKDF-SHA256) from `secrets`: the first binds, any reads. */
export function createEventIds(secrets: readonly string[]): EventIds {
  if (secrets.length === 0) throw new Error("createEventIds needs at least one secret");
  const keys = secrets.map((secret) =>
    hmacSha256Base64Url(new Uint8Array(hkdfSync("sha256", secret, HKDF_SALT, HKDF_INFO, 32)))
  );
  const tag = (key: (text: string) => string, binding: EventIdBinding, id: string) =>
    key(JSON.stringify([binding.sessionId, binding.server, id])).slice(0, TAG_CHARS);
  return {
    bind(body, binding) {
      return body.pipeThrough(idTagging((id) => `${id}${SEPARATOR}${tag(keys[0], binding, id)}`));
    },
    unbind(lastEventId, binding) {
      const at = lastEventId.length - TAG_CHARS - 1;
      if (at < 1 || lastEventId[at] !== SEPARATOR) return undefined;
      const id = lastEventId.slice(0, at);
      const mac = lastEventId.slice(at + 1);
      return keys.some((key) => timingSafeEqual(tag(key, binding, id), mac)) ? id : undefined;
    },
  };
}

/**
 * A request's headers with the MCP server's own id in place of the bound `Last-Event-ID`, or 400
 * when that id was not relayed to `sessionId` from `server`; the headers themselves when they
 * carry none.
 */
export function resumedFrom<H extends Readonly<Record<string, string>>>(
  eventIds: EventIds,
  headers: H,
  sessionId: string,
  server: string,
): H {
  const lastEventId = headers["last-event-id"];
  if (lastEventId === undefined) return headers;
  const id = eventIds.unbind(lastEventId, { sessionId, server });
  if (id === undefined) {
    throw new OAuthError(400, "invalid_request", "Unknown Last-Event-ID; open a new stream");
  }
  return { ...headers, "last-event-id": id };
}

/** Whether a line beginning with `start` may be an `id` field (`id:` or `id` alone). */
function mayBeId(start: string): boolean {
  return start.startsWith("id:") || "id:".startsWith(start);
}

/**
 * An event stream with each non-empty `id` field's value passed to `bind`. Lines end at CR, LF
 * or CRLF (an LF after a CR only ends an empty line here, which is never an id); only the start
 * of a line that may be an id field is held until its end, everything else passes as it comes.
 */
function idTagging(bind: (id: string) => string): TransformStream<Uint8Array, Uint8Array> {
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  /** The start of the line being read while it may be an id field. */
  let held: string | undefined = "";
  const lineEnds = /[\r\n]/g;
  /** Where the line from `from` ends (its CR or LF), or -1. */
  const lineEnd = (text: string, from: number) => {
    lineEnds.lastIndex = from;
    return lineEnds.exec(text)?.index ?? -1;
  };
  const rewrite = (line: string) => {
    if (!line.startsWith("id:")) return line;
    const value = line.slice(line.startsWith("id: ") ? 4 : 3);
    // An empty id resets the client's; one with NUL is ignored by it: neither is bound.
    return value === "" || value.includes("\0") ? line : `id: ${bind(value)}`;
  };
  const pass = (text: string): string => {
    let out = "";
    let i = 0;
    while (i < text.length) {
      const end = lineEnd(text, i);
      const piece = text.slice(i, end === -1 ? text.length : end);
      if (held !== undefined) {
        const start = held + piece;
        if (end === -1 && mayBeId(start) && start.length <= MAX_ID_LINE_CHARS) {
          held = start;
          return out;
        }
        out += mayBeId(start) && end !== -1 ? rewrite(start) : start;
      } else {
        out += piece;
      }
      if (end === -1) {
        held = undefined;
        return out;
      }
      out += text[end];
      held = "";
      i = end + 1;
    }
    return out;
  };
  const enqueue = (controller: TransformStreamDefaultController<Uint8Array>, text: string) => {
    if (text !== "") controller.enqueue(encoder.encode(text));
  };
  return new TransformStream({
    transform(chunk, controller) {
      enqueue(controller, pass(decoder.decode(chunk, { stream: true })));
    },
    flush(controller) {
      // A line the stream ends in is never read by a client: it goes as it came.
      enqueue(controller, pass(decoder.decode()) + (held ?? ""));
    },
  });
}
