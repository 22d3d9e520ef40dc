/**
 * Gateway mode (MCP_UPSTREAM_URL set): every request to the MCP resource path is authenticated
 * with the resource guard and forwarded to the MCP server with the user's upstream token in place
 * of ours. Bodies stream both ways, so Server-Sent Events reach the client event by event.
 *
 * @see RFC 9110 §7.6.1 (hop-by-hop fields), MCP spec "Streamable HTTP" and "Authorization"
 */

import type { AppDeps, OAuthRequestContext } from "../context.ts";
import { MCP_CORS } from "../cors.ts";
import { OAuthError } from "../errors.ts";
import {
  type AuthenticatedRequest,
  authenticateRequest,
  CLOCK_TOLERANCE_SECONDS,
  type GuardDeps,
  invalidTokenChallenge,
} from "../resource_guard.ts";
import { mcpResourceUrl } from "../resource_urls.ts";
import type { Route } from "../router.ts";
import { MCP_TOOLS_SCOPE } from "../scopes.ts";

/** The gateway as the app sees it. */
export interface McpGateway {
  /** The gateway's route when `url` is the MCP resource path, else undefined. */
  route(url: URL, baseUrl: string): Route | undefined;
}

/** Methods forwarded; OPTIONS is answered by the app as a CORS preflight. */
const FORWARDED_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] as const;

/** Hop-by-hop fields (RFC 9110 §7.6.1) and `Host`; `Proxy-*` and fields named in `Connection` too. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
]);
/** What the gateway sets itself, or must not pass on, on the way to the MCP server. */
const REPLACED_REQUEST_HEADERS = ["authorization", "private-token", "content-length"];
/** Encodings Deno's fetch decodes by itself (it asks for exactly these when we do not). */
const DECODED_BY_FETCH = new Set(["gzip", "br"]);

/** The gateway over `deps`, or undefined when MCP_UPSTREAM_URL is not configured. */
export function createMcpGateway(deps: AppDeps): McpGateway | undefined {
  const upstreamUrl = deps.config.mcpUpstreamUrl;
  if (!upstreamUrl) return undefined;
  const handler = (ctx: OAuthRequestContext) => handleGatewayRequest(ctx, upstreamUrl);
  const route: Route = {
    methods: Object.fromEntries(FORWARDED_METHODS.map((method) => [method, handler])),
    oauth: true,
    cors: MCP_CORS,
  };
  return {
    route: (url, baseUrl) =>
      trimPath(url.pathname) === resourcePath(deps, baseUrl) ? route : undefined,
  };
}

/** The resource guard's dependencies: the service's own store, upstream, signer and memory. */
function guardDeps(ctx: OAuthRequestContext): GuardDeps {
  const { store, clock, logger, verifiedTokens } = ctx.deps;
  return {
    store,
    clock,
    logger,
    upstream: ctx.oauth.upstream,
    signer: ctx.oauth.signer,
    clockToleranceSeconds: CLOCK_TOLERANCE_SECONDS,
    requiredScope: MCP_TOOLS_SCOPE,
    verifiedTokens,
  };
}

async function handleGatewayRequest(ctx: OAuthRequestContext, upstreamUrl: URL): Promise<Response> {
  const resource = mcpResourceUrl(ctx.deps.config, ctx.baseUrl);
  const auth = await authenticateRequest(guardDeps(ctx), ctx.request, {
    issuer: ctx.baseUrl,
    resource,
  });
  if (auth instanceof Response) return auth;
  return await forward(ctx, auth, upstreamUrl, resource);
}

/** Sends the request on; the timer covers only the wait for response headers. */
async function forward(
  ctx: OAuthRequestContext,
  auth: AuthenticatedRequest,
  upstreamUrl: URL,
  resource: string,
): Promise<Response> {
  const { request, deps } = ctx;
  const timeoutMs = deps.config.mcpUpstreamTimeoutMs;
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort(), timeoutMs);
  const target = new URL(upstreamUrl);
  target.search = ctx.url.search;
  try {
    const response = await fetch(target, {
      method: request.method,
      headers: upstreamRequestHeaders(request.headers, auth.gitlabToken, deps),
      body: request.method === "GET" || request.method === "HEAD" ? null : request.body,
      redirect: "manual",
      // Not request.signal: Deno.serve aborts it after every response. A client that leaves
      // mid-stream cancels the relayed body, which closes the upstream exchange too.
      signal: timeout.signal,
    });
    return relayResponse(response, resource);
  } catch (error) {
    throw upstreamFailure(ctx, auth, error, timeout.signal.aborted);
  } finally {
    clearTimeout(timer);
  }
}

/** The client's headers minus hop-by-hop ones and our token, plus the upstream token. */
function upstreamRequestHeaders(incoming: Headers, upstreamToken: string, deps: AppDeps): Headers {
  const headers = endToEndHeaders(incoming);
  for (const name of REPLACED_REQUEST_HEADERS) headers.delete(name);
  // Deno's fetch decodes only what it asks for itself; see relayResponse.
  headers.delete("accept-encoding");
  if (deps.config.mcpUpstreamTokenHeader === "private-token") {
    headers.set("PRIVATE-TOKEN", upstreamToken);
  } else {
    headers.set("Authorization", `Bearer ${upstreamToken}`);
  }
  return headers;
}

/**
 * The MCP server's response with a streaming body. Its challenges would send the client to
 * someone else's authorization server, so a 401 carries ours instead.
 */
function relayResponse(upstream: Response, resource: string): Response {
  const headers = endToEndHeaders(upstream.headers);
  const encoding = headers.get("content-encoding")?.trim().toLowerCase();
  if (encoding && DECODED_BY_FETCH.has(encoding)) {
    headers.delete("content-encoding");
    headers.delete("content-length");
  }
  headers.delete("www-authenticate");
  if (upstream.status === 401) {
    headers.set(
      "WWW-Authenticate",
      invalidTokenChallenge(resource, "The MCP server refused the GitLab token; sign in again"),
    );
  }
  return new Response(upstream.body, {
    status: upstream.status,
    statusText: upstream.statusText,
    headers,
  });
}

/** 504 when the response headers did not arrive in time, else 502. */
function upstreamFailure(
  ctx: OAuthRequestContext,
  auth: AuthenticatedRequest,
  error: unknown,
  timedOut: boolean,
): OAuthError {
  const timeoutMs = ctx.deps.config.mcpUpstreamTimeoutMs;
  ctx.deps.logger.warn(timedOut ? "MCP server timed out" : "MCP server unreachable", {
    requestId: ctx.requestId,
    sessionId: auth.sessionId,
    error: error instanceof Error ? error.name : String(error),
  });
  return timedOut
    ? new OAuthError(
      504,
      "gateway_timeout",
      `The MCP server did not answer within ${timeoutMs} ms`,
    )
    : new OAuthError(502, "bad_gateway", "The MCP server could not be reached");
}

/** A copy of `source` without hop-by-hop fields (RFC 9110 §7.6.1). */
function endToEndHeaders(source: Headers): Headers {
  const named = (source.get("connection") ?? "").split(",").map((name) =>
    name.trim().toLowerCase()
  );
  const headers = new Headers();
  for (const [name, value] of source) {
    if (HOP_BY_HOP.has(name) || name.startsWith("proxy-") || named.includes(name)) continue;
    headers.append(name, value);
  }
  return headers;
}

/** The path of the MCP resource URL (which may be on another host). */
function resourcePath(deps: AppDeps, baseUrl: string): string {
  return trimPath(new URL(mcpResourceUrl(deps.config, baseUrl)).pathname);
}

function trimPath(pathname: string): string {
  return pathname.replace(/\/+$/, "") || "/";
}
