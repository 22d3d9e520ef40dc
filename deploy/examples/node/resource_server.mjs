// An MCP resource server in Node that accepts the service's ES256/EdDSA access tokens (npm jose,
// declared in the package.json beside it): `npm install`, then
// `AUTH_ISSUER=<the service's BASE_URL> npm start`.
import { createServer } from "node:http";
import { createRemoteJWKSet, jwtVerify } from "jose";

const issuer = process.env.AUTH_ISSUER ?? "https://auth.example.com"; // the service's BASE_URL
const resource = `${issuer}/mcp`;
const keys = createRemoteJWKSet(new URL(`${issuer}/.well-known/jwks.json`));
const metadata = `resource_metadata="${issuer}/.well-known/oauth-protected-resource/mcp"`;

createServer(async (req, res) => {
  const token = req.headers.authorization?.match(/^Bearer (.+)$/i)?.[1] ?? "";
  const refuse = (status, error) =>
    res.writeHead(status, { "WWW-Authenticate": `Bearer error="${error}", ${metadata}` }).end();
  let claims;
  try {
    ({ payload: claims } = await jwtVerify(token, keys, {
      issuer,
      algorithms: ["ES256", "EdDSA"],
    }));
  } catch {
    return refuse(401, "invalid_token");
  }
  if (claims.resource !== resource) {
    return refuse(401, "invalid_token");
  }
  // A machine caller (ci:…, client:…): its rule's servers and tools are the gateway's to enforce.
  if (/^(ci|client):/.test(claims.sub)) return refuse(401, "invalid_token");
  if (!claims.scope.split(" ").includes("mcp:tools")) return refuse(403, "insufficient_scope");
  res.writeHead(200, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ user: claims.gitlab_user, client: claims.client_id })); // your MCP server here
}).listen(Number(process.env.PORT ?? 3001));
