/**
 * `FLOOR=proxy-read` for bench/floor.ts: the least a gateway doing what issue 21 asks of every
 * proxied POST can cost in Deno, written as plainly as it can be (no token check, no routing,
 * no metrics): it reads the body whole and parses its JSON-RPC message, forwards the MCP headers
 * with a GitLab token under a time limit, reads the answer whole to tell a JSON-RPC error, answers
 * with the service's seven headers, and writes a request line and an audit line to stdout,
 * gathered per turn of the event loop as the service's logger does. Its CPU per call against
 * `FLOOR=proxy` is how much of issue 21 §4's "≥ 0.65× floor-proxy" the required work leaves to
 * everything else.
 */

import { setImmediate } from "node:timers";

const FORWARDED = new Set([
  "accept",
  "content-type",
  "mcp-protocol-version",
  "mcp-method",
  "mcp-name",
]);
const ANSWER_HEADERS: [string, string][] = [
  ["X-Content-Type-Options", "nosniff"],
  ["X-Frame-Options", "DENY"],
  ["Referrer-Policy", "no-referrer"],
  ["Access-Control-Allow-Origin", "*"],
  ["Access-Control-Expose-Headers", "WWW-Authenticate, Mcp-Session-Id"],
];
const TIME_LIMIT_MS = 30_000;

/** The handler, forwarding to `upstream`. */
export function proxyRead(upstream: URL): (request: Request) => Promise<Response> {
  const decoder = new TextDecoder();
  const log = gatheredStdout();
  return async (request) => {
    const started = performance.now();
    const url = new URL(request.url);
    const headers: [string, string][] = [];
    request.headers.forEach((value, name) => {
      if (FORWARDED.has(name) || name.startsWith("mcp-param-")) headers.push([name, value]);
    });
    headers.push(["Authorization", "Bearer glpat-xxxxxxxxxxxxxxxxxxxx"]);
    const body = await request.bytes();
    const message = JSON.parse(decoder.decode(body));
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), TIME_LIMIT_MS);
    const response = await fetch(upstream, {
      method: request.method,
      headers,
      body,
      redirect: "manual",
      signal: controller.signal,
    });
    clearTimeout(timer);
    const answer = await response.bytes();
    const rpcError = decoder.decode(answer).includes('"error"');
    const relayed = new Response(answer, { status: response.status });
    relayed.headers.set("content-type", response.headers.get("content-type") ?? "");
    for (const [name, value] of ANSWER_HEADERS) relayed.headers.append(name, value);
    const requestId = crypto.randomUUID();
    relayed.headers.append("X-Request-Id", requestId);
    const ms = Math.round((performance.now() - started) * 10) / 10;
    log(JSON.stringify({
      time: new Date().toISOString(),
      level: "info",
      message: "mcp",
      requestId,
      method: message.method,
      name: message.params?.name,
      rpcId: message.id,
      status: response.status,
      rpcError,
      ms,
    }));
    log(JSON.stringify({
      time: new Date().toISOString(),
      level: "info",
      message: "request",
      requestId,
      method: request.method,
      path: url.pathname,
      status: response.status,
      ms,
    }));
    return relayed;
  };
}

/** Lines to stdout, written together on the next turn of the event loop. */
function gatheredStdout(): (line: string) => void {
  const encoder = new TextEncoder();
  let pending = "";
  const flush = () => {
    const bytes = encoder.encode(pending);
    pending = "";
    for (let written = 0; written < bytes.length;) {
      written += Deno.stdout.writeSync(bytes.subarray(written));
    }
  };
  return (line) => {
    if (pending === "") setImmediate(flush);
    pending += `${line}\n`;
  };
}
