/**
 * The gateway's header firewall: which client headers reach the MCP server and which MCP-server
 * headers reach the client. Both are allow-lists. Some GitLab MCP servers honour `JOB-TOKEN`
 * over `Authorization`, or send the token to a URL named in a header, so a client header passed
 * on blindly could override or exfiltrate the user's GitLab token; and an MCP server's
 * `Set-Cookie` would land on the service's own origin.
 *
 * @see MCP spec "Streamable HTTP" (session and protocol-version headers), docs/gateway.md
 *   "The gateway's headers"
 */

/**
 * Encodings the MCP client decodes (the ones Deno's fetch decodes by itself): such an answer
 * reaches the client plain, without its `Content-Encoding`.
 */
export const DECODED_ENCODINGS: ReadonlySet<string> = new Set(["gzip", "br"]);

/**
 * Client headers always passed on (the MCP transport's own, and content negotiation). Besides
 * these, every `Mcp-Param-*` header (MCP_PARAM_PREFIX): revision 2026-07-28 has intermediaries
 * forward the ones they do not recognise, and the gateway recognises none.
 */
const FORWARDED_REQUEST_HEADERS: ReadonlySet<string> = new Set([
  "accept",
  "content-type",
  "mcp-session-id",
  "mcp-protocol-version",
  "mcp-method",
  "mcp-name",
  "last-event-id",
  "user-agent",
]);

/** The prefix of the headers a tool's `x-mcp-header` parameters travel in (2026-07-28). */
export const MCP_PARAM_PREFIX = "mcp-param-";

/**
 * MCP-server headers passed back; the gateway adds its own (CORS, `WWW-Authenticate`) after.
 * `Content-Encoding` only when the body is still encoded (see `relayedResponseHeaders`).
 */
const RETURNED_RESPONSE_HEADERS: readonly string[] = [
  "content-type",
  "content-encoding",
  "cache-control",
  "mcp-session-id",
  "mcp-protocol-version",
  "retry-after",
  "vary",
  // Tells a reverse proxy in front of us not to buffer (the gateway sets `no` on every stream).
  "x-accel-buffering",
];

/**
 * Headers MCP_UPSTREAM_FORWARD_HEADERS may never name: credentials (ours, GitLab's, cookies),
 * GitLab's impersonation header, and the message's own framing.
 */
export const NEVER_FORWARDED_HEADERS: ReadonlySet<string> = new Set([
  "authorization",
  "private-token",
  "job-token",
  "deploy-token",
  "sudo",
  "cookie",
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "upgrade",
  "expect",
]);

/**
 * The headers sent to the MCP server: the allowed client headers, the operator's extra ones,
 * and the user's GitLab token in `tokenHeader` (`Authorization: Bearer` or `PRIVATE-TOKEN`).
 * `Accept-Encoding` is the MCP client's own (mcp_client/): it decodes DECODED_ENCODINGS.
 */
export function upstreamRequestHeaders(
  incoming: HeaderSnapshot,
  extra: readonly string[],
  token: UpstreamToken,
): HeaderList {
  const headers: HeaderList = [];
  for (const name in incoming) {
    // Names come lower-cased and combined; values byte for byte (a `=?base64?…?=` value is never
    // decoded).
    if (FORWARDED_REQUEST_HEADERS.has(name) || name.startsWith(MCP_PARAM_PREFIX)) {
      headers.push([name, incoming[name]]);
    }
  }
  for (const [name, value] of extra.length > 0 ? pick(incoming, extra) : []) {
    // An operator's list may repeat a name, or one passed anyway: each goes once.
    if (!headers.some(([sent]) => sent === name)) headers.push([name, value]);
  }
  if (token.header === "private-token") headers.push(["PRIVATE-TOKEN", token.value]);
  else if (token.header === "authorization") {
    headers.push(["Authorization", `Bearer ${token.value}`]);
  }
  return headers;
}

/** The GitLab token the MCP server receives, and the header it goes in (`none`: no header). */
export interface UpstreamToken {
  header: "authorization" | "private-token" | "none";
  value: string;
}

/**
 * The MCP server's headers the client may see; never `Set-Cookie` or internal headers. `Allow`
 * only on a 405, where it tells a 2025 client that GET streams and DELETE are not served.
 */
export function relayedResponseHeaders(upstream: HeaderSnapshot, status: number): HeaderList {
  const headers = pick(upstream, RETURNED_RESPONSE_HEADERS);
  if (status === 405) headers.push(...pick(upstream, ["allow"]));
  const encoding = upstream["content-encoding"]?.trim().toLowerCase();
  // The MCP client has decoded these already: the client gets the plain body.
  if (encoding && DECODED_ENCODINGS.has(encoding)) {
    return headers.filter(([name]) => name !== "content-encoding");
  }
  return headers;
}

/**
 * Headers as a list of name and value: what `fetch` and `Response` take, built without the
 * checks a `Headers` object runs on every change (the values come from one already).
 */
export type HeaderList = [string, string][];

/**
 * A message's headers read once: lower-cased names to their combined values (`Set-Cookie`: the
 * last, never relayed anyway). A `Headers` object checks the name and scans its list on every
 * `get`; the gateway reads about a dozen per call, which one `forEach` into this answers.
 */
export type HeaderSnapshot = Readonly<Record<string, string>>;

/** `headers` as a HeaderSnapshot. */
export function snapshotHeaders(headers: Headers): HeaderSnapshot {
  const snapshot: Record<string, string> = Object.create(null);
  headers.forEach((value, name) => {
    snapshot[name] = value;
  });
  return snapshot;
}

function pick(source: HeaderSnapshot, names: readonly string[]): HeaderList {
  const headers: HeaderList = [];
  for (const name of names) {
    const value = source[name];
    if (value !== undefined) headers.push([name, value]);
  }
  return headers;
}
