/**
 * The audit's watch over an event stream for a JSON-RPC error (`sseErrorWatcher`): events split
 * anywhere across chunks, and an event too large to hold let go (an MCP server that sends one
 * must not make the gateway hold, and search again and again, everything it sends).
 */

import assert from "node:assert/strict";
import { sseErrorWatcher } from "../src/gateway/audit.ts";

const encoder = new TextEncoder();
const ERROR_EVENT =
  'event: message\ndata: {"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}\n\n';
const RESULT_EVENT = 'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n';

function feedAll(text: string, chunkChars: number) {
  const watcher = sseErrorWatcher();
  for (let i = 0; i < text.length; i += chunkChars) {
    watcher.feed(encoder.encode(text.slice(i, i + chunkChars)));
  }
  return watcher.sawError();
}

Deno.test("audit watcher: an error event is seen however the stream is cut, a result is not", () => {
  for (const ending of ["\n\n", "\r\n\r\n"]) {
    const stream = RESULT_EVENT + ERROR_EVENT.replace(/\n\n$/, ending);
    for (let size = 1; size <= 8; size++) assert.equal(feedAll(stream, size), true, `${size}`);
  }
  assert.equal(feedAll(RESULT_EVENT.repeat(100), 7), false);
});

Deno.test("audit watcher: an event over 1 MiB goes unread, and the events after it are watched", () => {
  const huge = 'event: message\ndata: {"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"' +
    "x".repeat(2 * 1024 * 1024) + '"}}\n\n';
  assert.equal(feedAll(huge, 64 * 1024), false, "held whole, it would have been read");
  assert.equal(feedAll(huge + RESULT_EVENT + ERROR_EVENT, 64 * 1024), true);
  // An event without "error" is let go sooner, and watching resumes after it all the same.
  const quiet = `event: message\ndata: ${"y".repeat(200 * 1024)}\n\n`;
  assert.equal(feedAll(quiet + ERROR_EVENT, 4096), true);
});
