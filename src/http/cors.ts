/**
 * CORS for the endpoints browsers call cross-origin: any origin, never credentials (our tokens
 * travel in headers and bodies, not cookies). One implementation, two policies: the OAuth
 * endpoints, and the MCP gateway, whose clients also send and read the MCP session headers.
 *
 * @see Fetch standard §3.2 (CORS protocol), MCP authorization spec
 */

/** What a cross-origin caller may send and read. */
export interface CorsPolicy {
  allowHeaders: string;
  exposeHeaders: string;
}

/** Metadata, registration, token and revocation endpoints (MCP authorization spec, RFC 6750). */
export const OAUTH_CORS: CorsPolicy = {
  allowHeaders: "Content-Type, Authorization, MCP-Protocol-Version",
  exposeHeaders: "WWW-Authenticate",
};

/** The MCP gateway: Streamable HTTP's session and resumption headers too. */
export const MCP_CORS: CorsPolicy = {
  allowHeaders: "Content-Type, Authorization, MCP-Protocol-Version, Mcp-Session-Id, Last-Event-ID",
  exposeHeaders: "WWW-Authenticate, Mcp-Session-Id",
};

const MAX_AGE_SECONDS = "86400";

/** The 204 answer to a preflight for a route serving `methods`. */
export function preflight(policy: CorsPolicy, methods: readonly string[]): Response {
  return new Response(null, {
    status: 204,
    headers: {
      "Access-Control-Allow-Methods": [...methods, "OPTIONS"].join(", "),
      "Access-Control-Allow-Headers": policy.allowHeaders,
      "Access-Control-Max-Age": MAX_AGE_SECONDS,
    },
  });
}

/** Marks a response readable from any origin under `policy`. */
export function allowCrossOrigin(headers: Headers, policy: CorsPolicy): void {
  headers.set("Access-Control-Allow-Origin", "*");
  headers.set("Access-Control-Expose-Headers", policy.exposeHeaders);
}
