/**
 * Library entry: protect a Deno MCP server with this service's access tokens, without the
 * gateway's proxy hop.
 *
 * `createResourceGuard` checks a request exactly as the gateway does (the gateway uses the same
 * code): the `Authorization: Bearer` JWT (HS256 only, signed with `jwtSecret`, the current or
 * the previous one: tokens of a service under ACCESS_TOKEN_ALG=ES256/EdDSA are verified with
 * `jwksUrl` instead; issuer, expiry with 30 s of leeway), its `resource` claim (RFC 8707: a
 * token bound to another MCP server is refused; tokens from before resource indicators carry
 * none), the session it names (an expired session is refused at once, a revoked one within a
 * second, the time an accepted token is remembered, even while the JWT lives), the `mcp:tools`
 * scope; then it refreshes the session's GitLab token when it expires within five minutes,
 * under the same KV lease as the service, so the two never spend one GitLab refresh token twice.
 * Failures come back as ready responses: 401 with `WWW-Authenticate: Bearer
 * error="invalid_token", ..., resource_metadata=` (or a bare `Bearer resource_metadata=` when
 * no token was sent), 403 `insufficient_scope`, 503 when GitLab could not renew an already
 * expired token.
 *
 * Resource servers without the service's KV or secret use one of two other modes instead of
 * `jwtSecret`: `{ jwksUrl }` verifies ES256/EdDSA tokens (ACCESS_TOKEN_ALG) with the published
 * keys, fetching the set again once for an unknown `kid` (at most every 30 s); `{ introspection:
 * { url, token } }` asks the service's `/introspect` (RFC 7662), keeping an active answer a few
 * seconds, so a revoked session is refused within that time. Both answer who the user is
 * (`VerifiedAccess`), not their GitLab token, and both refuse a token bound to another resource
 * and a machine caller's token (its rule is enforced only at the gateway).
 *
 * @example A resource server in another process, verifying with the service's JWKS
 * ```ts
 * import { createResourceGuard } from "./mod.ts";
 *
 * const guard = createResourceGuard({
 *   issuer: "https://auth.example.com",
 *   jwksUrl: "https://auth.example.com/.well-known/jwks.json",
 * });
 * Deno.serve({ port: 3003 }, async (request) => {
 *   const access = await guard.authenticate(request);
 *   if (access instanceof Response) return access;
 *   return Response.json({ user: access.user.username, scopes: access.scopes });
 * });
 * ```
 *
 * @example An MCP server in the same process as the service, sharing its KV
 * ```ts
 * // @ts-types="@modelcontextprotocol/sdk/server/mcp"
 * import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
 * // @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
 * import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
 * import { createResourceGuard } from "./mod.ts";
 *
 * const kv = await Deno.openKv(Deno.env.get("KV_PATH"));
 * const guard = createResourceGuard({
 *   kv,
 *   jwtSecret: Deno.env.get("JWT_SECRET")!,
 *   issuer: "https://auth.example.com",
 *   resource: "https://auth.example.com/mcp",
 *   gitlab: { url: "https://gitlab.com", clientId: Deno.env.get("GITLAB_CLIENT_ID")! },
 * });
 *
 * Deno.serve({ port: 3002 }, async (request) => {
 *   const auth = await guard.authenticate(request);
 *   if (auth instanceof Response) return auth;
 *   const server = new McpServer({ name: "projects", version: "1.0.0" });
 *   server.registerTool("whoami", { description: "The signed-in GitLab user" }, async () => {
 *     const me = await fetch("https://gitlab.com/api/v4/user", {
 *       headers: { Authorization: `Bearer ${auth.gitlabToken}` },
 *     });
 *     return { content: [{ type: "text", text: await me.text() }] };
 *   });
 *   const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined });
 *   await server.connect(transport);
 *   return transport.handleRequest(request);
 * });
 * ```
 *
 * @module
 */

export {
  type AuthenticatedRequest,
  type AuthenticatedUser,
  CLOCK_TOLERANCE_SECONDS,
  createResourceGuard,
  type GuardGitLabOptions,
  type GuardIntrospectionOptions,
  type IntrospectionResourceGuardOptions,
  type JwksResourceGuardOptions,
  MCP_TOOLS_SCOPE,
  type RemoteGuardCommonOptions,
  type RemoteResourceGuard,
  type ResourceGuard,
  type ResourceGuardOptions,
  type VerifiedAccess,
} from "./src/library/library.ts";
export type { Clock } from "./src/clock.ts";
export type { KvBackend, StoreDatabase } from "./src/store/backend.ts";
export type { CommitOutcome, PlannedWrite } from "./src/store/group_commit.ts";
export { createLogger, type LineWriter, type LogFields, type Logger } from "./src/logger.ts";
export {
  type AuthorizationCodeGrant,
  type AuthorizationRedirect,
  type DeviceAuthorization,
  type DevicePollResult,
  type Upstream,
  type UpstreamBackoff,
  UpstreamError,
  type UpstreamFailure,
  type UpstreamProfile,
  type UpstreamTokens,
  type UpstreamUser,
} from "./src/upstream/types.ts";
