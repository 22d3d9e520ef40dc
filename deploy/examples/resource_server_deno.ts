/**
 * An MCP resource server in Deno that accepts the service's access tokens without its KV or
 * secret: with the published keys (ES256/EdDSA), or by asking `/introspect` when
 * INTROSPECTION_TOKEN is set (revocation counts within seconds, any ACCESS_TOKEN_ALG).
 * From the repository's root: `AUTH_ISSUER=<the service's BASE_URL> deno run --allow-net
 * --allow-env deploy/examples/resource_server_deno.ts`.
 */
import { createResourceGuard } from "../../mod.ts"; // this repository's mod.ts (not on JSR yet)

const issuer = Deno.env.get("AUTH_ISSUER") ?? "https://auth.example.com"; // the service's BASE_URL
const introspectionToken = Deno.env.get("INTROSPECTION_TOKEN");
const guard = introspectionToken
  ? createResourceGuard({
    issuer,
    introspection: { url: `${issuer}/introspect`, token: introspectionToken },
  })
  : createResourceGuard({ issuer, jwksUrl: `${issuer}/.well-known/jwks.json` });

Deno.serve({ port: Number(Deno.env.get("PORT") ?? 3002) }, async (request) => {
  const access = await guard.authenticate(request); // 401/403 come back ready to answer
  if (access instanceof Response) return access;
  // Your MCP server here: access.user, access.scopes, access.clientId, access.sessionId.
  return Response.json({ user: access.user.username, client: access.clientId });
});
