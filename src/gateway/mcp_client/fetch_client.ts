/**
 * The MCP server reached with Deno's `fetch`: for `https:` MCP_UPSTREAM_URLs, where it brings
 * the runtime's TLS settings (DENO_CERT, the system's certificates), HTTP/2 and HTTPS_PROXY, and
 * for `http:` ones when a proxy variable is set (for_url.ts), since it applies HTTP_PROXY and
 * NO_PROXY.
 */

import { snapshotHeaders } from "../headers.ts";
import type { McpAnswer, McpClient, McpExchange } from "./types.ts";

/**
 * A client sending every exchange with `fetch` (which pools connections itself). `close()`
 * aborts what it is still sending or receiving, as `node:http`'s client ends its connections:
 * a server a reload removed answers nothing more (servers/reload.ts); later exchanges go out.
 */
export function createFetchClient(): McpClient {
  let closing = new AbortController();
  return {
    send: (exchange) => send(exchange, closing.signal),
    close() {
      closing.abort(new Error("the MCP server's client was closed"));
      closing = new AbortController();
    },
  };
}

async function send(
  { url, method, headers, body, deadline }: McpExchange,
  closed: AbortSignal,
): Promise<McpAnswer> {
  const response = await fetch(url, {
    method,
    headers,
    body,
    redirect: "manual",
    signal: AbortSignal.any([deadline.signal, closed]),
  });
  if (response.status === 101) {
    await response.body?.cancel();
    throw new Error("the MCP server switched protocols");
  }
  const stream = response.body;
  return {
    status: response.status,
    statusText: response.statusText,
    ok: response.ok,
    headers: snapshotHeaders(response.headers),
    body: stream && { stream: () => stream, bytes: () => response.bytes() },
    cancel: async () => await stream?.cancel(),
  };
}
