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
  /**
   * Header names beyond `allowHeaders` a preflight grants when asked for them (lower case);
   * a header whose name starts with this prefix.
   */
  allowRequestedPrefix?: string;
}

/**
 * Metadata, registration, token and revocation endpoints (MCP authorization spec, RFC 6750).
 * `Retry-After` is not a CORS-safelisted response header: without it a browser client could
 * not read how long a 429 or 503 asks it to wait.
 */
export const OAUTH_CORS: CorsPolicy = {
  allowHeaders: "Content-Type, Authorization, MCP-Protocol-Version",
  exposeHeaders: "WWW-Authenticate, Retry-After",
};

/**
 * The MCP gateway: Streamable HTTP's session and resumption headers (2025 revisions), its
 * request metadata headers (2026-07-28), and whichever `Mcp-Param-*` headers a client's tools
 * need, which no fixed list can name.
 */
export const MCP_CORS: CorsPolicy = {
  allowHeaders: "Content-Type, Authorization, MCP-Protocol-Version, Mcp-Session-Id, " +
    "Last-Event-ID, Mcp-Method, Mcp-Name",
  // 2026-07-28 clients read no response header beyond these (no sessions, no resumption);
  // Retry-After of the gateway's 429 and 503 and of those it relays.
  exposeHeaders: "WWW-Authenticate, Mcp-Session-Id, Retry-After",
  allowRequestedPrefix: "mcp-param-",
};

const MAX_AGE_SECONDS = "86400";

/**
 * The 204 answer to a preflight for a route serving `methods`; `requested` is the preflight's
 * `Access-Control-Request-Headers`.
 */
export function preflight(
  policy: CorsPolicy,
  methods: readonly string[],
  requested: string | null = null,
): Response {
  const headers: Record<string, string> = {
    "Access-Control-Allow-Methods": [...methods, "OPTIONS"].join(", "),
    "Access-Control-Allow-Headers": allowedHeaders(policy, requested),
    "Access-Control-Max-Age": MAX_AGE_SECONDS,
  };
  if (policy.allowRequestedPrefix) headers["Vary"] = "Access-Control-Request-Headers";
  return new Response(null, { status: 204, headers });
}

/** The policy's headers, and those asked for that its prefix grants. */
function allowedHeaders(policy: CorsPolicy, requested: string | null): string {
  const prefix = policy.allowRequestedPrefix;
  if (!prefix || !requested) return policy.allowHeaders;
  const granted = requested.split(",").map((name) => name.trim().toLowerCase())
    .filter((name) => name.startsWith(prefix) && /^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name));
  return granted.length === 0 ? policy.allowHeaders : [policy.allowHeaders, ...granted].join(", ");
}

/** The headers that make a response readable from any origin under `policy`. */
export function crossOriginHeaders(policy: CorsPolicy): [string, string][] {
  return [
    ["Access-Control-Allow-Origin", "*"],
    ["Access-Control-Expose-Headers", policy.exposeHeaders],
  ];
}
