/**
 * Every endpoint's path, named once: the route table, the metadata documents, the redirect
 * sign-in and the pages all build their URLs from these. The gateway's MCP path is not here:
 * it follows MCP_RESOURCE_URL (`{base}/mcp` by default, see gateway/resource.ts).
 */
export const PATHS = {
  home: "/",
  liveness: "/healthz",
  readiness: "/readyz",
  authorize: "/authorize",
  poll: "/oauth/poll",
  consent: "/oauth/consent",
  callback: "/oauth/callback",
  token: "/token",
  deviceAuthorization: "/device_authorization",
  device: "/device",
  register: "/register",
  revoke: "/revoke",
  metrics: "/metrics",
  introspect: "/introspect",
  jwks: "/.well-known/jwks.json",
  authorizationServerMetadata: "/.well-known/oauth-authorization-server",
  protectedResourceMetadata: "/.well-known/oauth-protected-resource",
} as const;
