/** An HTTP peer that answers with exact bytes: what no well-behaved server library would send. */

/**
 * A server on loopback that reads each request and writes `answer` as it is, then closes the
 * connection or holds it open (`after`). `url` is its `/mcp`.
 */
export function startRawServer(answer: string, after: "close" | "hold") {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const serving = (async () => {
    for await (const conn of listener) {
      await conn.read(new Uint8Array(64 * 1024)).catch(() => null);
      await conn.write(new TextEncoder().encode(answer)).catch(() => 0);
      if (after === "close") conn.close();
      else held.push(conn);
    }
  })();
  return {
    url: new URL(`http://127.0.0.1:${listener.addr.port}/mcp`),
    async close() {
      listener.close();
      for (const conn of held) {
        try {
          conn.close();
        } catch {
          // the peer closed it
        }
      }
      await serving.catch(() => {});
    },
  };
}

/** 200 with a JSON `Content-Length` of 1,000, then a few bytes and the connection closed. */
export const BROKEN_OFF_ANSWER =
  'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"jsonrpc":"2.0",';

/** A switch to WebSocket, which the gateway does not speak. */
export const SWITCHING_PROTOCOLS_ANSWER =
  "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
