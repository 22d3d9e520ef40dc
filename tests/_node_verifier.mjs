// A verifier that is not ours: npm jose's createRemoteJWKSet in a Node process, over HTTP.
// POST /verify (body: a token) answers {kid} or 401 {code}; POST /reload stands for "the cache
// time passed" (jose's own reload of the key set).
import { createServer } from "node:http";
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from "jose";

const issuer = process.env.AUTH_ISSUER;
const keys = createRemoteJWKSet(new URL(`${issuer}/.well-known/jwks.json`));

async function body(req) {
  let text = "";
  for await (const chunk of req) text += chunk;
  return text;
}

const server = createServer(async (req, res) => {
  const answer = (status, value) => res.writeHead(status).end(JSON.stringify(value));
  if (req.url === "/reload") return keys.reload().then(() => answer(200, {}));
  const token = await body(req);
  try {
    await jwtVerify(token, keys, { issuer, algorithms: ["ES256", "EdDSA"] });
    answer(200, { kid: decodeProtectedHeader(token).kid });
  } catch (error) {
    answer(401, { code: error.code ?? String(error) });
  }
});
server.listen(Number(process.env.PORT), "127.0.0.1");
