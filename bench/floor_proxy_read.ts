/**
 * `FLOOR=proxy-read` for bench/floor.ts: the least a gateway doing what issue 21 asks of every
 * proxied POST can cost in Deno, written as plainly as it can be (no token check, no routing,
 * no metrics): it reads the body whole and parses its JSON-RPC message, forwards the MCP headers
 * with a GitLab token under a time limit, reads the answer whole to tell a JSON-RPC error, answers
 * with the service's seven headers, and writes a request line and an audit line through the
 * service's own logger (stdout, gathered per turn of the event loop). Its CPU per call against
 * `FLOOR=proxy` is how much of issue 21 §4's "≥ 0.65× floor-proxy" the required work leaves to
 * everything else.
 */

import { createLogger } from "../src/logger.ts";
import { responseWithHeaders } from "../src/http/responses.ts";

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
  const logger = createLogger();
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
    const requestId = crypto.randomUUID();
    const relayed = responseWithHeaders(answer, { status: response.status }, [
      ["content-type", response.headers.get("content-type") ?? ""],
      ...ANSWER_HEADERS,
      ["X-Request-Id", requestId],
    ]);
    const ms = Math.round((performance.now() - started) * 10) / 10;
    logger.info("mcp", {
      requestId,
      method: message.method,
      name: message.params?.name,
      rpcId: message.id,
      status: response.status,
      rpcError,
      ms,
    });
    logger.info("request", {
      requestId,
      method: request.method,
      path: url.pathname,
      status: response.status,
      ms,
    });
    return relayed;
  };
}
