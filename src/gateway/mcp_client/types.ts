/**
 * How the gateway reaches the MCP server: one exchange at a time, the request whole, the answer
 * handed over once its headers are in. Two clients keep this shape (`for_url.ts` picks one per
 * MCP_UPSTREAM_URL); the gateway sees only this.
 */

import type { Deadline } from "../deadlines.ts";
import type { HeaderList, HeaderSnapshot } from "../headers.ts";

/** One request to the MCP server. */
export interface McpExchange {
  url: URL;
  method: string;
  headers: HeaderList;
  body: Uint8Array<ArrayBuffer> | null;
  /** Covers the wait for the answer's headers only; an open stream is never cut by it. */
  deadline: Deadline;
}

/**
 * The MCP server's answer; `cancel()` gives it up (and the connection it came on). Bodies come
 * decoded when the MCP server sent them in one of DECODED_ENCODINGS (headers.ts;
 * `Content-Encoding` still says how they travelled).
 */
export interface McpAnswer {
  status: number;
  statusText: string;
  ok: boolean;
  /** Lower-cased names to their values (repeated ones joined with ", "). */
  headers: HeaderSnapshot;
  /** Null when the answer has none (204, 304, a HEAD's). */
  body: McpBody | null;
  cancel(): Promise<void>;
}

/** An answer's body, read once, one way or the other. */
export interface McpBody {
  /** As it arrives; a web stream costs, so only what is read in parts takes one. */
  stream(): ReadableStream<Uint8Array>;
  /** Whole; rejects when the MCP server breaks it off. */
  bytes(): Promise<Uint8Array<ArrayBuffer>>;
}

/**
 * Sends exchanges to the MCP server; `close()` ends its connections and the exchanges still on
 * them (a later exchange opens new ones).
 */
export interface McpClient {
  /** Rejects when the MCP server cannot be reached, or with the deadline's reason in time. */
  send(exchange: McpExchange): Promise<McpAnswer>;
  close(): void;
}
