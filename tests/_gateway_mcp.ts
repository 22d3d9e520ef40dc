/**
 * Gateway tests over real HTTP: the real app in gateway mode served on loopback, in front of a
 * scripted MCP server on loopback (copied from gateway_test.ts's helpers, which are being split).
 */

import { createLogger, type Logger } from "../src/logger.ts";
import { createEventIds } from "../src/gateway/event_ids.ts";
import {
  type FakeClock,
  issueTokens,
  makeTestApp,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";

/** An MCP server on loopback answering with `handler`; keeps every request it got. */
export interface ScriptedUpstream {
  url: string;
  requests: Request[];
  close(): Promise<void>;
}

export function startScripted(
  handler: (request: Request) => Response | Promise<Response>,
  path = "/mcp",
): ScriptedUpstream {
  const requests: Request[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    requests.push(request);
    return handler(request);
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}${path}`,
    requests,
    close: () => server.shutdown(),
  };
}

/** The gateway served on loopback, with a signed-in user's tokens and its log lines. */
export interface GatewayServer {
  t: TestApp;
  /** `http://127.0.0.1:port/mcp` */
  mcpUrl: string;
  accessToken: string;
  refreshToken: string;
  /** Every log line, parsed. */
  lines: Record<string, unknown>[];
  close(): Promise<void>;
}

export async function startGateway(
  upstreamUrl: string,
  options: {
    env?: Record<string, string>;
    kvPath?: string;
    clock?: FakeClock;
    /** false: no user signs in here (another instance's tokens are used). */
    signIn?: boolean;
  } = {},
): Promise<GatewayServer> {
  const lines: Record<string, unknown>[] = [];
  const logger: Logger = createLogger((line) => lines.push(JSON.parse(line)));
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: upstreamUrl, ...options.env },
    logger,
    kvPath: options.kvPath,
    clock: options.clock,
  });
  const { access_token, refresh_token } = options.signIn === false
    ? { access_token: "", refresh_token: "" }
    : await issueTokens(t);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request, info) => t.app(request, info),
  );
  return {
    t,
    mcpUrl: `http://127.0.0.1:${server.addr.port}/mcp`,
    accessToken: access_token,
    refreshToken: refresh_token,
    lines,
    async close() {
      await server.shutdown();
      t.close();
    },
  };
}

/** The audit lines among `lines`. */
export function auditLines(lines: Record<string, unknown>[]): Record<string, unknown>[] {
  return lines.filter((line) => line.message === "mcp");
}

/** Revokes `refreshToken` at the app (RFC 7009), which ends its session. */
export async function revoke(t: TestApp, refreshToken: string): Promise<void> {
  const response = await t.app(
    new Request(`${TEST_BASE}/revoke`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ token: refreshToken }),
    }),
  );
  await response.body?.cancel();
  if (response.status !== 200) throw new Error(`revoke answered ${response.status}`);
}

/** A 2026-07-28 request body: `method` with `params` and the per-request `_meta`. */
export function modernBody(
  id: number | string,
  method: string,
  params: Record<string, unknown> = {},
): string {
  return JSON.stringify({
    jsonrpc: "2.0",
    id,
    method,
    params: {
      ...params,
      _meta: {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { name: "test", version: "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
      },
    },
  });
}

/** Resolves when `promise` does, or rejects after `ms` naming `what`. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** POSTs `body` (a JSON-RPC message as text) to the gateway with the user's token. */
export function postToGateway(
  g: Pick<GatewayServer, "mcpUrl" | "accessToken">,
  body: string,
  headers: Record<string, string> = {},
): Promise<Response> {
  return fetch(g.mcpUrl, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${g.accessToken}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      ...headers,
    },
    body,
  });
}

/**
 * The MCP server's event id `id` as the gateway hands it to the client of `accessToken` (bound
 * to the token's session and the MCP server): what that client sends back as `Last-Event-ID`.
 */
export async function boundEventId(accessToken: string, id: string, server = "default") {
  const { sid } = JSON.parse(
    new TextDecoder().decode(Uint8Array.fromBase64(accessToken.split(".")[1], {
      alphabet: "base64url",
    })),
  );
  const event = new Response(`id: ${id}\n\n`).body!;
  const bound = createEventIds([TEST_SECRET]).bind(event, { sessionId: sid, server });
  return (await new Response(bound).text()).slice("id: ".length, -2);
}
