/**
 * The MCP server reached over plain HTTP with `node:http`: a pool of keep-alive connections, the
 * request sent whole, the answer handed over once its headers are in. Deno's `fetch` builds a
 * WHATWG Request, Headers and dependent AbortSignal for every call and converts every header
 * through WebIDL; this path does without, which takes a sixth off the gateway's CPU per call
 * (bench/README.md, "Fifth pass").
 */

import { Agent, type IncomingHttpHeaders, type IncomingMessage, request } from "node:http";
import type { Socket } from "node:net";
import { pipeline, type Readable } from "node:stream";
import { createBrotliDecompress, createGunzip } from "node:zlib";
import { joinChunks } from "../../http/bytes.ts";
import { SYSTEM_TIMERS, type Timers } from "../deadlines.ts";
import type { HeaderList, HeaderSnapshot } from "../headers.ts";
import type { McpAnswer, McpClient, McpExchange } from "./types.ts";

/**
 * How long a pooled connection may sit idle before the gateway closes it (at most half as long
 * again, the sweep's period): less than the MCP servers' own keep-alive limits (Node's 5 s,
 * gunicorn's 2 s), so that a request is never sent on a connection its server is closing
 * (`fetch` retries such a request; `node:http` cannot know whether the server saw it, and a
 * `tools/call` must not run twice).
 */
export const IDLE_CONNECTION_MS = 1_000;

/** What an answer is decoded with, by its `Content-Encoding` (headers.ts's DECODED_ENCODINGS). */
const DECODERS: ReadonlyMap<string, () => NodeJS.ReadWriteStream> = new Map([
  ["gzip", createGunzip],
  ["br", createBrotliDecompress],
]);

/** The system's timers, not keeping the process alive for a sweep. */
const BACKGROUND_TIMERS: Timers = {
  ...SYSTEM_TIMERS,
  setTimeout(run, ms) {
    const timer = setTimeout(run, ms);
    Deno.unrefTimer(timer);
    return timer;
  },
};

/**
 * A client on one connection pool, opened with the first exchange (a process that never proxies,
 * the operator's CLI for one, runs no sweep); `close()` ends the pool's connections.
 */
export function createNodeHttpClient(
  options: { idleConnectionMs?: number; timers?: Timers } = {},
): McpClient {
  let pool: { agent: Agent; stopSweeping: () => void } | undefined;
  const open = () => {
    const agent = new Agent({ keepAlive: true });
    const idleMs = options.idleConnectionMs ?? IDLE_CONNECTION_MS;
    const stopSweeping = sweepIdleConnections(agent, idleMs, options.timers ?? BACKGROUND_TIMERS);
    return { agent, stopSweeping };
  };
  return {
    send: (exchange) => send((pool ??= open()).agent, exchange),
    close: () => {
      pool?.stopSweeping();
      pool?.agent.destroy();
      pool = undefined;
    },
  };
}

/**
 * Closes `agent`'s connections idle for `idleMs` or more, looking every `idleMs / 2`: one timer
 * for the pool, where the agent's own `timeout` option re-arms one per request (which cost the
 * gateway as much CPU as the rest of the MCP client).
 */
function sweepIdleConnections(agent: Agent, idleMs: number, timers: Timers): () => void {
  const idleSince = new WeakMap<Socket, number>();
  agent.on("free", (socket: Socket) => idleSince.set(socket, timers.now()));
  let timer: unknown;
  const sweep = () => {
    const stale = timers.now() - idleMs;
    for (const sockets of Object.values(agent.freeSockets)) {
      for (const socket of sockets ?? []) {
        if ((idleSince.get(socket) ?? -Infinity) <= stale) socket.destroy();
      }
    }
    timer = timers.setTimeout(sweep, idleMs / 2);
  };
  timer = timers.setTimeout(sweep, idleMs / 2);
  return () => timers.clearTimeout(timer);
}

function send(agent: Agent, exchange: McpExchange): Promise<McpAnswer> {
  const { url, method, headers, body, deadline } = exchange;
  return new Promise((resolve, reject) => {
    const outgoing = request({
      agent,
      // A URL's IPv6 host comes in brackets; a socket wants the address alone.
      hostname: url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname,
      port: url.port || 80,
      path: url.pathname + url.search,
      method,
      headers: withOwnHeaders(headers),
    }, (incoming) => resolve(answerFrom(incoming, method)));
    // Also after the answer came: an 'error' nobody listens to would end the process.
    outgoing.on("error", reject);
    // A 101 hands the connection over and answers nothing: the gateway speaks HTTP only.
    outgoing.on("upgrade", (_answer, socket: Socket) => {
      socket.destroy();
      reject(new Error("the MCP server switched protocols"));
    });
    deadline.whenExpired(() => {
      outgoing.destroy(deadline.signal.reason);
      reject(deadline.signal.reason); // destroy() reports nothing once the socket is gone
    });
    outgoing.end(body ?? undefined);
  });
}

/**
 * `headers` for `node:http`, asking for the body uncompressed unless an operator passes the
 * client's `Accept-Encoding` on: compressing for the next machine costs both ends CPU.
 */
function withOwnHeaders(headers: HeaderList): Record<string, string> {
  const record: Record<string, string> = Object.fromEntries(headers);
  record["accept-encoding"] ??= "identity";
  return record;
}

function answerFrom(incoming: IncomingMessage, method: string): McpAnswer {
  const status = incoming.statusCode ?? 502;
  const headers = snapshotOf(incoming.headers);
  incoming.on("error", () => {}); // reported to the reader by `close` without `end`
  const noBody = hasNoBody(status, method);
  if (noBody) incoming.resume();
  const decoder = DECODERS.get(headers["content-encoding"]?.trim().toLowerCase() ?? "");
  const source: Readable = decoder && !noBody
    ? pipeline(incoming, decoder(), () => {}) as unknown as Readable
    : incoming;
  return {
    status,
    statusText: incoming.statusMessage ?? "",
    ok: status >= 200 && status <= 299,
    headers,
    body: noBody
      ? null
      : { stream: () => streamOf(source, incoming), bytes: () => collect(source) },
    cancel: () => {
      incoming.destroy();
      return Promise.resolve();
    },
  };
}

/**
 * Whether an answer has no body, as `fetch` sees it: a HEAD's, a 204, 205 or 304 (a 1xx never
 * gets here: `node:http` reports those as 'information' or 'upgrade').
 */
function hasNoBody(status: number, method: string): boolean {
  return method === "HEAD" || status === 204 || status === 205 || status === 304;
}

/** The answer's headers as the gateway reads them. */
function snapshotOf(headers: IncomingHttpHeaders): HeaderSnapshot {
  const snapshot: Record<string, string> = Object.create(null);
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) snapshot[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  return snapshot;
}

/** The MCP server closed the connection before the answer was whole. */
function brokenOff(): Error {
  return new Error("the MCP server's answer broke off");
}

/** `source` whole; rejects when it fails or closes before its end. */
function collect(source: Readable): Promise<Uint8Array<ArrayBuffer>> {
  return new Promise((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    let size = 0;
    let ended = false;
    source.on("data", (chunk: Uint8Array) => {
      chunks.push(chunk);
      size += chunk.byteLength;
    });
    source.on("end", () => {
      ended = true;
      resolve(joinChunks(chunks, size));
    });
    source.on("error", reject);
    // An Error is made only when needed: its stack trace costs microseconds.
    source.on("close", () => ended || reject(brokenOff()));
  });
}

/**
 * `source` as a web stream, read as the reader asks (paused while a chunk waits); cancelling it
 * closes the answer's connection. An answer that closes before its end errors the stream.
 */
function streamOf(source: Readable, incoming: IncomingMessage): ReadableStream<Uint8Array> {
  let finished = false;
  return new ReadableStream<Uint8Array>({
    start(controller) {
      source.on("data", (chunk: Uint8Array) => {
        if (finished) return;
        controller.enqueue(chunk);
        if ((controller.desiredSize ?? 0) <= 0) source.pause();
      });
      source.on("end", () => {
        if (finished) return;
        finished = true;
        controller.close();
      });
      const fail = (error: unknown) => {
        if (finished) return;
        finished = true;
        controller.error(error);
      };
      source.on("error", fail);
      source.on("close", () => finished || fail(brokenOff()));
    },
    pull() {
      source.resume();
    },
    cancel() {
      finished = true;
      incoming.destroy();
    },
  });
}
