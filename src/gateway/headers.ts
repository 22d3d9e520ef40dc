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

/**
 * The `Via` the gateway adds to every request it forwards (RFC 9110 §7.6.3): the protocol it
 * received (Deno.serve does not say; 1.1 is what a reverse proxy in front speaks) and a fixed
 * pseudonym, never the host's name.
 */
export const VIA = "1.1 gitlab-mcp-auth";

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
 * The headers sent to the MCP server: the allowed client headers (of `incoming` as
 * `endToEndHeaders` leaves it), the operator's extra ones, the gateway's `Via` (after the
 * client's when the operator lists `Via`), and the user's GitLab token in `tokenHeader`
 * (`Authorization: Bearer` or `PRIVATE-TOKEN`). `Accept-Encoding` is the MCP client's own
 * (mcp_client/): it decodes DECODED_ENCODINGS.
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
  let via = VIA;
  for (const [name, value] of extra.length > 0 ? pick(incoming, extra) : []) {
    // Each recipient appends itself to the chain it received.
    if (name === "via") via = `${value}, ${VIA}`;
    // An operator's list may repeat a name, or one passed anyway: each goes once.
    else if (!headers.some(([sent]) => sent === name)) headers.push([name, value]);
  }
  headers.push(["via", via]);
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
 * only on a 405, where it tells a 2025 client that GET streams and DELETE are not served. A
 * `Cache-Control` that lets a shared cache keep the answer becomes `no-store`.
 */
export function relayedResponseHeaders(upstream: HeaderSnapshot, status: number): HeaderList {
  const headers = pick(upstream, RETURNED_RESPONSE_HEADERS);
  if (status === 405) headers.push(...pick(upstream, ["allow"]));
  const cacheControl = upstream["cache-control"];
  if (cacheControl !== undefined && sharedCacheMayStore(cacheControl)) {
    headers[headers.findIndex(([name]) => name === "cache-control")][1] = "no-store";
  }
  const encoding = upstream["content-encoding"]?.trim().toLowerCase();
  // The MCP client has decoded these already: the client gets the plain body.
  const decoded = encoding !== undefined && DECODED_ENCODINGS.has(encoding);
  const connection = upstream["connection"];
  if (!decoded && connection === undefined) return headers;
  // The fields its `Connection` names were for the gateway's hop only (RFC 9110 §7.6.1).
  const hopOnly = connection === undefined ? [] : connectionOptions(connection);
  return headers.filter(([name]) =>
    !(decoded && name === "content-encoding") && !hopOnly.includes(name)
  );
}

/**
 * Whether a `Cache-Control` lets a shared cache (a CDN or reverse proxy in front of the service)
 * keep an answer to a request with `Authorization` and hand it to another user: `public`,
 * `s-maxage` and `must-revalidate` do (RFC 9111 §3.5). Every gateway answer is one user's.
 */
function sharedCacheMayStore(cacheControl: string): boolean {
  for (const directive of cacheControl.toLowerCase().split(",")) {
    const name = directive.split("=", 1)[0].trim();
    if (name === "public" || name === "s-maxage" || name === "must-revalidate") return true;
  }
  return false;
}

/**
 * `incoming` without the fields its `Connection` names (RFC 9110 §7.6.1: they are for this hop
 * only, so never forwarded): what the MCP server may be sent, and so what the gateway decides
 * from. An `Mcp-Session-Id` named there is neither sent nor checked: the request is as
 * sessionless for the binding as for the MCP server. The fields the gateway reads itself and
 * never forwards (NEVER_FORWARDED_HEADERS: `Authorization`, `Content-Length`) stay for it to
 * read. Without a `Connection` field, or one naming nothing else present (`keep-alive`,
 * `close`), `incoming` itself.
 */
export function endToEndHeaders(incoming: HeaderSnapshot): HeaderSnapshot {
  const connection = incoming["connection"];
  if (connection === undefined) return incoming;
  let kept: Record<string, string> | undefined;
  for (const name of connectionOptions(connection)) {
    if (incoming[name] === undefined || NEVER_FORWARDED_HEADERS.has(name)) continue;
    const copy: Record<string, string> = kept ?? Object.assign(Object.create(null), incoming);
    delete copy[name];
    kept = copy;
  }
  return kept ?? incoming;
}

/** The field names a `Connection` value lists, lower-cased (RFC 9110 §7.6.1). */
function connectionOptions(value: string): string[] {
  const names: string[] = [];
  for (const option of value.split(",")) {
    const name = option.trim().toLowerCase();
    if (name !== "") names.push(name);
  }
  return names;
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
