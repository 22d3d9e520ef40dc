/**
 * The gateway's open event streams, each held only while the authorization that opened it
 * holds. A stream ends when its access token expires, or when its session ends: at once when it
 * ended in this process (`endSession`, called wherever the verified-token memory forgets a
 * session), and within a check interval when it ended elsewhere (another instance, the operator's
 * CLI): one timer per process, running only while streams are open, reads the sessions of all
 * open streams together (the store's group read makes that one KV read per ten sessions); a
 * machine caller's stream (its token names no stored session) ends the same way when the rules
 * in force (MACHINE_ACCESS_FILE) no longer admit it at its MCP server, and a machine client's
 * when the client is deleted (`admin clients delete`). The
 * streams of an MCP server that a reload of MCP_SERVERS_FILE removed end at once (`endServer`),
 * and GET streams at shutdown (`endForShutdown`).
 */

import type { Clock } from "../clock.ts";
import type { MachineCaller } from "../machine/caller.ts";
import type { Logger } from "../logger.ts";
import type { Store } from "../store/mod.ts";
import type { VerifiedTokens } from "./verified_tokens.ts";

/** How often streams are checked against the store: a revocation elsewhere bites within this. */
export const STREAM_CHECK_INTERVAL_MS = 2000;

/** The timers the check runs on; tests inject their own. */
export interface IntervalTimers {
  setInterval(run: () => void, ms: number): unknown;
  clearInterval(timer: unknown): void;
}

const SYSTEM_INTERVALS: IntervalTimers = {
  setInterval: (run, ms) => setInterval(run, ms),
  clearInterval: (timer) => clearInterval(timer as ReturnType<typeof setInterval>),
};

/** What a held stream is held by. */
export interface StreamAuthorization {
  /** Our session the access token belongs to (a machine caller's: its token's own `sid`). */
  sessionId: string;
  /**
   * Set for a machine caller, which has no stored session: its stream holds while the rules in
   * force admit it at `server` (`admittedAt`), and a client's while the client it was admitted
   * as (`client`) is stored.
   */
  machine?: { client?: MachineClientHeld; admittedAt(server: string): boolean };
  /** When the access token expires (milliseconds). */
  expiresAtMs: number;
  /** The MCP server it comes from (`default` for `/mcp`). */
  server: string;
  /**
   * A GET's stream (the standalone one, or one resumed), which an MCP server may hold open for
   * ever: it ends at shutdown, where a POST's is left to finish its call.
   */
  endsAtShutdown: boolean;
}

/** The registry of open streams. */
export interface OpenStreams {
  /**
   * `body` relayed chunk by chunk, ended (and the MCP server's side cancelled) when `auth` no
   * longer holds; `finished` runs once when the stream is over, however it ended.
   */
  hold(
    body: ReadableStream<Uint8Array>,
    auth: StreamAuthorization,
    observer: StreamObserver,
  ): ReadableStream<Uint8Array>;
  /** Ends every stream of a session that just ended in this process. */
  endSession(sessionId: string): void;
  /** Ends every stream of an MCP server that is no longer served. */
  endServer(server: string): void;
  /**
   * Ends every stream that `endsAtShutdown`, and any such stream opened from now on, so that
   * they do not hold a graceful shutdown: the client opens its GET stream again (with
   * `Last-Event-ID` where it resumes) at another instance.
   */
  endForShutdown(): void;
  /** Checks every open stream now (what the timer runs). */
  check(): Promise<void>;
  /** How many streams are open. */
  readonly size: number;
}

/** Who watches a held stream: `see` each chunk as it passes, `finished` once at its end. */
export interface StreamObserver {
  see?: (chunk: Uint8Array) => void;
  finished: (why: StreamEnd) => void;
}

/** How a held stream ended. */
export type StreamEnd =
  | "complete"
  | "client_closed"
  | "revoked"
  | "expired"
  | "server_removed"
  | "shutdown"
  | "failed";

/** The machine client a stream was opened by: its id and when the stored client was added. */
export interface MachineClientHeld {
  id: string;
  addedAt: number;
}

/** What `hold`'s `machine` is for the request's machine caller (undefined: a person). */
export function machineHolder(
  caller: MachineCaller | undefined,
): StreamAuthorization["machine"] {
  if (!caller) return undefined;
  const { kind, clientId, clientAddedAt, admittedAt } = caller;
  return kind === "client" && clientAddedAt !== undefined
    ? { client: { id: clientId, addedAt: clientAddedAt }, admittedAt }
    : { admittedAt };
}

interface Held extends StreamAuthorization {
  end(why: StreamEnd): void;
}

/** What the registry needs. */
export interface OpenStreamsDeps {
  store: Pick<Store, "getSession" | "getMachineClient">;
  clock: Clock;
  logger: Logger;
  timers?: IntervalTimers;
  checkEveryMs?: number;
}

/** An empty registry. */
export function createOpenStreams(deps: OpenStreamsDeps): OpenStreams {
  const timers = deps.timers ?? SYSTEM_INTERVALS;
  const everyMs = deps.checkEveryMs ?? STREAM_CHECK_INTERVAL_MS;
  const streams = new Set<Held>();
  let timer: unknown;
  let checking = false;
  let shuttingDown = false;

  function add(held: Held): void {
    streams.add(held);
    if (shuttingDown && held.endsAtShutdown) return held.end("shutdown");
    if (timer === undefined) {
      timer = timers.setInterval(() => void check(), everyMs);
      // A process with only streams open may still exit (tests, a shutdown).
      if (typeof timer === "number") Deno.unrefTimer(timer);
    }
  }

  function remove(held: Held): void {
    streams.delete(held);
    if (streams.size === 0 && timer !== undefined) {
      timers.clearInterval(timer);
      timer = undefined;
    }
  }

  async function check(): Promise<void> {
    if (checking || streams.size === 0) return;
    checking = true;
    try {
      const now = deps.clock.now();
      for (const held of [...streams]) {
        if (held.expiresAtMs <= now) held.end("expired");
      }
      const held = [...streams];
      const sessionIds = unique(held.filter((one) => !one.machine).map((one) => one.sessionId));
      const clientIds = unique(held.flatMap((one) => one.machine?.client?.id ?? []));
      const [sessions, clients] = await Promise.all([
        Promise.all(sessionIds.map((id) => deps.store.getSession(id))),
        Promise.all(clientIds.map((id) => deps.store.getMachineClient(id))),
      ]);
      const ended = new Set(sessionIds.filter((_, index) => sessions[index] === null));
      const addedAt = new Map(clientIds.map((id, index) => [id, clients[index]?.createdAt]));
      for (const one of held) {
        const { machine } = one;
        const client = machine?.client;
        const gone = machine
          ? !machine.admittedAt(one.server) ||
            (client !== undefined && addedAt.get(client.id) !== client.addedAt)
          : ended.has(one.sessionId);
        if (gone) one.end("revoked");
      }
    } catch (error) {
      // The store did not answer: the streams stay until the next check.
      deps.logger.warn("open stream check failed", { error: String(error) });
    } finally {
      checking = false;
    }
  }

  return {
    hold(body, auth, observer) {
      let held: Held | undefined;
      return relay(body, {
        see: observer.see,
        finished(why) {
          if (held) remove(held);
          observer.finished(why);
        },
      }, (end) => {
        held = { ...auth, end };
        add(held);
      });
    },
    endSession(sessionId) {
      for (const held of [...streams]) {
        if (held.sessionId === sessionId) held.end("revoked");
      }
    },
    endServer(server) {
      for (const held of [...streams]) {
        if (held.server === server) held.end("server_removed");
      }
    },
    endForShutdown() {
      shuttingDown = true;
      for (const held of [...streams]) {
        if (held.endsAtShutdown) held.end("shutdown");
      }
    },
    check,
    get size() {
      return streams.size;
    },
  };
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}

/**
 * `source` passed on chunk by chunk as it arrives (an SSE keep-alive is not held back), with a
 * handle to end it from outside. `register` receives that handle before the first read.
 */
function relay(
  source: ReadableStream<Uint8Array>,
  observer: StreamObserver,
  register: (end: (why: StreamEnd) => void) => void,
): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  let over = false;
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  const finish = (why: StreamEnd) => {
    if (over) return false;
    over = true;
    observer.finished(why);
    return true;
  };
  const end = (why: StreamEnd) => {
    if (!finish(why)) return;
    reader.cancel().catch(() => {});
    try {
      controller?.close();
    } catch {
      // Already closed or errored.
    }
  };
  return new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
      register(end);
    },
    async pull(c) {
      try {
        const { done, value } = await reader.read();
        if (over) return;
        if (done) {
          finish("complete");
          c.close();
        } else {
          observer.see?.(value);
          c.enqueue(value);
        }
      } catch (error) {
        if (finish("failed")) c.error(error);
      }
    },
    cancel(reason) {
      // The client left: that is how a 2026-07-28 client cancels its request.
      finish("client_closed");
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}

/**
 * `verifiedTokens` whose `forgetSession` (called wherever a session ends in this process) also
 * ends that session's open streams.
 */
export function endingStreamsWithSessions(
  verifiedTokens: VerifiedTokens,
  streams: Pick<OpenStreams, "endSession">,
): VerifiedTokens {
  return {
    ...verifiedTokens,
    forgetSession(sessionId) {
      verifiedTokens.forgetSession(sessionId);
      streams.endSession(sessionId);
    },
  };
}
