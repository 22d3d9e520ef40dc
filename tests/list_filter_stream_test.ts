/**
 * The policy's list filter over an event stream (`filterEventStream`), cut into chunks of every
 * size: events pass byte for byte with each of the three line endings, the list answer alone is
 * rewritten, and a boundary split across chunks is still found.
 */

import assert from "node:assert/strict";
import { filterEventStream, listRequestsOf } from "../src/gateway/list_filter.ts";

const encoder = new TextEncoder();

async function filtered(text: string, chunkChars: number): Promise<string> {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < text.length; i += chunkChars) {
        controller.enqueue(encoder.encode(text.slice(i, i + chunkChars)));
      }
      controller.close();
    },
  });
  const lists = listRequestsOf([{ method: "tools/list", id: 7 }]);
  const permits = (_target: string, name: string) => name !== "delete_project";
  return await new Response(filterEventStream(body, lists, permits)).text();
}

Deno.test("list filter (event stream): every chunk size, every line ending", async () => {
  const answer = JSON.stringify({
    jsonrpc: "2.0",
    id: 7,
    result: { tools: [{ name: "delete_project" }, { name: "read_file" }] },
  });
  const kept = JSON.stringify({
    jsonrpc: "2.0",
    id: 7,
    result: { tools: [{ name: "read_file" }] },
  });
  for (const eol of ["\n", "\r\n", "\r"]) {
    const note =
      `event: message${eol}data: {"jsonrpc":"2.0","method":"notifications/message"}${eol}${eol}`;
    const stream = `${note}event: message${eol}data: ${answer}${eol}${eol}${note}`;
    const expected = `${note}event: message\ndata: ${kept}\n\n${note}`;
    for (const size of [1, 2, 3, 5, 8, 64, stream.length]) {
      assert.equal(
        await filtered(stream, size),
        expected,
        `${JSON.stringify(eol)} in chunks of ${size}`,
      );
    }
  }
});
