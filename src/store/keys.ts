/**
 * Every Deno KV key the service writes, built in one place. Nothing outside `src/store/` builds
 * a key; tests and the operator's tools list records through `recordsOf`.
 *
 * | key                                 | value             | lifetime (expireIn = GC only) |
 * |-------------------------------------|-------------------|-------------------------------|
 * | ["flow", sha256(flow_state)]        | StoredFlow        | upstream `expires_in`         |
 * | ["signin", sha256(id or state)]     | StoredSignIn      | 10 minutes                    |
 * | ["code", sha256(code)]              | CodeRecord        | 10 minutes                    |
 * | ["unredeemed", expiresAt, session]  | UnredeemedSignIn  | until swept (GC: a week)      |
 * | ["stranded", expiresAt, sha256(flow_state)] | StrandedTokens | until swept (GC: a week)  |
 * | ["session", session id]             | SessionRecord     | inactivity lifetime (+ 8 days once indexed) |
 * | ["idle", day of expiry, session id] | IdleSessionEntry  | until swept (GC: a week after its day) |
 * | ["lease", kind, id]                 | { expiresAt }     | a few seconds                 |
 * | ["client", client id]               | ClientRecord      | 1 day unused, 30 after use    |
 * | ["rate", bucket, ip, window]        | request count     | the window                    |
 * | ["mcp_session", sha256(mcp id)]     | McpSessionBinding | the session idle lifetime     |
 * | ["mcp_session_of", session, boundAt, sha256(mcp id)] | McpSessionIndexEntry | as the binding |
 * | ["client_metadata", sha256(url)]    | ClientDocumentRecord | its cache lifetime         |
 * | ["pause", "upstream"]               | { expiresAt }     | the pause (at most 15 min)    |
 * | ["repeat", sha256(request)]         | StoredRepeat      | 60 seconds                    |
 * | ["budget", "window", second]        | PollWindow        | a minute                      |
 * | ["budget", "active"]                | ActivePrefixes    | a minute after the last poll  |
 * | ["budget", "cut"]                   | BudgetCut         | until the budget recovered    |
 * | ["device", sha256(device_code)]    | DeviceAuthorizationRecord | DEVICE_CODE_TTL        |
 * | ["device_user", sha256(user_code)] | { deviceHash }    | DEVICE_CODE_TTL               |
 * | ["count", "operator_revocations"]   | sessions (number) | until taken (GC: 30 days)     |
 * | ["machine_client", client id]       | MachineClientRecord | until `admin clients delete` |
 * | ["jti", sha256(issuer, jti)]        | { expiresAt }     | the assertion's exp + leeway  |
 *
 * Secrets (flow states, codes, device and user codes, MCP session ids) appear in keys only as SHA-256 hashes.
 * A machine client's secret appears nowhere, only its SHA-256 inside the record.
 */

import { sha256Base64Url } from "../crypto.ts";
import { backendOf, type StoreDatabase } from "./backend.ts";

/** The kinds of record, each the first part of its keys. */
export const RECORD_KINDS = [
  "flow",
  "signin",
  "code",
  "unredeemed",
  "stranded",
  "session",
  "idle",
  "lease",
  "client",
  "rate",
  "mcp_session",
  "mcp_session_of",
  "client_metadata",
  "pause",
  "repeat",
  "budget",
  "count",
  "device",
  "device_user",
  "machine_client",
  "jti",
] as const;

/** One kind of record. */
export type RecordKind = (typeof RECORD_KINDS)[number];

/** The key of the device flow a page polls with `flowState`. */
export function flowKey(flowState: string): Deno.KvKey {
  return ["flow", sha256Base64Url(flowState)];
}

/**
 * The key of a redirect sign-in: by the id on its consent page, then by the `state` sent to the
 * upstream.
 */
export function signInKey(idOrState: string): Deno.KvKey {
  return ["signin", sha256Base64Url(idOrState)];
}

/** The key of an authorization code. */
export function codeKey(code: string): Deno.KvKey {
  return ["code", sha256Base64Url(code)];
}

/**
 * The key of a sign-in whose code is not redeemed yet: ordered by the code's expiry, so the
 * abandoned ones are a key range.
 */
export function unredeemedKey(codeExpiresAt: number, sessionId: string): Deno.KvKey {
  return ["unredeemed", codeExpiresAt, sessionId];
}

/** The range of unredeemed sign-ins whose code expired before `nowMs`. */
export function abandonedSignInRange(nowMs: number): Deno.KvListSelector {
  return { start: ["unredeemed"], end: ["unredeemed", nowMs] };
}

/**
 * The key of the GitLab token a device flow holds before it completes (GitLab issued it, then
 * the user lookup failed for a while): ordered by the flow's expiry, so the flows abandoned with
 * a token are a key range. `flowId` is the flow key's hash.
 */
export function strandedTokensKey(flowExpiresAt: number, flowId: string): Deno.KvKey {
  return ["stranded", flowExpiresAt, flowId];
}

/** The range of tokens held by flows that expired before `nowMs`. */
export function strandedTokensRange(nowMs: number): Deno.KvListSelector {
  return { start: ["stranded"], end: ["stranded", nowMs] };
}

/** The key of a device authorization by its device code's hash (`deviceCodeHash`). */
export function deviceKeyOfHash(deviceHash: string): Deno.KvKey {
  return ["device", deviceHash];
}

/** The hash a device code's authorization is keyed by. */
export function deviceCodeHash(deviceCode: string): string {
  return sha256Base64Url(deviceCode);
}

/** The key that finds a device authorization by its user code (canonical `XXXX-XXXX`). */
export function deviceUserKey(userCodeHash: string): Deno.KvKey {
  return ["device_user", userCodeHash];
}

/** The hash a user code is keyed by. */
export function userCodeHash(userCode: string): string {
  return sha256Base64Url(`user_code:${userCode}`);
}

/** The key of a session. */
export function sessionKey(id: string): Deno.KvKey {
  return ["session", id];
}

/**
 * The key of a session's entry in the idle index: ordered by the day its inactivity expiry falls
 * in (`day`: whole days since the epoch), so the sessions whose day ended are a key range.
 */
export function idleSessionKey(day: number, sessionId: string): Deno.KvKey {
  return ["idle", day, sessionId];
}

/** The range of idle index entries whose day ended before `day` began. */
export function idleSessionRange(day: number): Deno.KvListSelector {
  return { start: ["idle"], end: ["idle", day] };
}

/** The key of a lease on `kind`/`id`. */
export function leaseKey(kind: string, id: string): Deno.KvKey {
  return ["lease", kind, id];
}

/** The key of a registered client. */
export function clientKey(clientId: string): Deno.KvKey {
  return ["client", clientId];
}

/** The key of an operator-registered machine client (`admin clients add`). */
export function machineClientKey(clientId: string): Deno.KvKey {
  return ["machine_client", clientId];
}

/** The key that remembers an accepted assertion's `jti` from `issuer` (single use). */
export function assertionIdKey(issuer: string, jti: string): Deno.KvKey {
  return ["jti", sha256Base64Url(`${issuer}\n${jti}`)];
}

/** The key of a cached Client ID Metadata Document (the URL may be long, so hashed). */
export function clientDocumentKey(url: string): Deno.KvKey {
  return ["client_metadata", sha256Base64Url(url)];
}

/** The key of one rate-limit counter: a bucket, an address, a fixed window. */
export function rateKey(bucket: string, ip: string, window: number): Deno.KvKey {
  return ["rate", bucket, ip, window];
}

/** The key of the one service-wide pause of upstream polling (the upstream's rate limit). */
export function upstreamPauseKey(): Deno.KvKey {
  return ["pause", "upstream"];
}

/** The key of the GitLab polls spent in one second (the poll budget's window). */
export function pollWindowKey(second: number): Deno.KvKey {
  return ["budget", "window", second];
}

/** The key of the client prefixes that asked for GitLab polls lately (the budget's fair shares). */
export function activePrefixesKey(): Deno.KvKey {
  return ["budget", "active"];
}

/** The key of the poll budget's cut after GitLab's 429. */
export function budgetCutKey(): Deno.KvKey {
  return ["budget", "cut"];
}

/** The key of the sessions the operator's CLI ended that no service process has counted yet. */
export function operatorRevocationsKey(): Deno.KvKey {
  return ["count", "operator_revocations"];
}

/** The key of a recent `/authorize` request, by the hash of its whole query. */
export function repeatKey(requestHash: string): Deno.KvKey {
  return ["repeat", requestHash];
}

/** The key of the binding of an MCP server's `Mcp-Session-Id` to one of our sessions. */
export function mcpSessionKey(mcpSessionId: string): Deno.KvKey {
  return ["mcp_session", sha256Base64Url(mcpSessionId)];
}

/** The binding key for an MCP session id's hash (as an index entry keeps it). */
export function mcpSessionKeyOfHash(hash: string): Deno.KvKey {
  return ["mcp_session", hash];
}

/** The hash an MCP session id's binding is keyed by. */
export function mcpSessionHash(mcpSessionId: string): string {
  return sha256Base64Url(mcpSessionId);
}

/**
 * A session's index of its MCP session bindings, oldest first (`boundAt`, epoch ms), so the
 * bindings can be capped and ended with the session.
 */
export function mcpSessionIndexKey(sessionId: string, boundAt: number, hash: string): Deno.KvKey {
  return ["mcp_session_of", sessionId, boundAt, hash];
}

/** Every index entry of one session. */
export function mcpSessionIndexPrefix(sessionId: string): Deno.KvKey {
  return ["mcp_session_of", sessionId];
}

/** The prefix under which every record of `kind` lives (`[]`: everything). */
export function recordPrefix(kind?: RecordKind): Deno.KvKey {
  return kind === undefined ? [] : [kind];
}

/** Every entry of `kind` (or every entry at all), in key order: for tests and operators. */
export function recordsOf<T = unknown>(
  kv: StoreDatabase,
  kind?: RecordKind,
): Promise<Deno.KvEntry<T>[]> {
  return Array.fromAsync(backendOf(kv).list<T>({ prefix: recordPrefix(kind) }));
}

/** The kind of record a key belongs to, or undefined for a key the store does not write. */
export function kindOfKey(key: Deno.KvKey): RecordKind | undefined {
  const first = key[0];
  return (RECORD_KINDS as readonly unknown[]).includes(first) ? first as RecordKind : undefined;
}
