/**
 * `createResourceGuard`'s remote modes ask the service at its own URLs and nowhere else: a
 * redirect of `/introspect` or of the key set (a compromised proxy, a wrong route) is not
 * followed, so another host can neither vouch for a made-up token nor sign one, and the token
 * asked about never reaches it.
 */

import assert from "node:assert/strict";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { createResourceGuard, type VerifiedAccess } from "../mod.ts";

/** Another host: answers introspection "active" for anything and publishes its own key. */
async function elsewhere() {
  const { publicKey, privateKey } = await generateKeyPair("ES256", { extractable: true });
  const jwk = { ...await exportJWK(publicKey), kid: "elsewhere", alg: "ES256", use: "sig" };
  const asked: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    asked.push(`${request.method} ${new URL(request.url).pathname} ${await request.text()}`);
    return new URL(request.url).pathname === "/keys"
      ? Response.json({ keys: [jwk] })
      : Response.json({
        active: true,
        ...claimsOf(issuer),
        exp: Math.floor(Date.now() / 1000) + 600,
      });
  });
  let issuer = "";
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    asked,
    privateKey,
    setIssuer: (url: string) => issuer = url,
    close: () => server.shutdown(),
  };
}

function claimsOf(issuer: string) {
  return {
    iss: issuer,
    sub: "1",
    sid: "s",
    scope: "mcp:tools mcp:resources",
    gitlab_user: "mallory",
    resource: `${issuer}/mcp`,
  };
}

/** The service's address, redirecting its introspection and key set to `target`. */
function redirecting(target: string) {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    const path = new URL(request.url).pathname;
    const to = path === "/introspect" ? `${target}/introspect` : `${target}/keys`;
    return new Response(null, {
      status: path === "/introspect" ? 307 : 302,
      headers: { Location: to },
    });
  });
  return { url: `http://127.0.0.1:${server.addr.port}`, close: () => server.shutdown() };
}

function withBearer(token: string): Request {
  return new Request("http://resource.test/mcp", {
    method: "POST",
    headers: { Authorization: `Bearer ${token}` },
  });
}

async function status(result: VerifiedAccess | Response): Promise<number | string> {
  if (!(result instanceof Response)) return `accepted as ${result.user.username}`;
  await result.body?.cancel();
  return result.status;
}

Deno.test("remote guard: a redirect of /introspect or of the key set is not followed", async () => {
  const other = await elsewhere();
  const service = redirecting(other.url);
  other.setIssuer(service.url);
  try {
    const introspecting = createResourceGuard({
      issuer: service.url,
      introspection: {
        url: `${service.url}/introspect`,
        token: "a-resource-server-secret-of-32-bytes",
      },
    });
    const madeUp = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl";
    assert.equal(await status(await introspecting.authenticate(withBearer(madeUp))), 503);
    const forged = await new SignJWT(claimsOf(service.url))
      .setProtectedHeader({ alg: "ES256", kid: "elsewhere", typ: "JWT" })
      .setIssuedAt()
      .setExpirationTime("10m")
      .sign(other.privateKey);
    const verifying = createResourceGuard({
      issuer: service.url,
      jwksUrl: `${service.url}/.well-known/jwks.json`,
    });
    assert.equal(await status(await verifying.authenticate(withBearer(forged))), 503);
    assert.deepEqual(other.asked, [], "the other host was never asked");
  } finally {
    await service.close();
    await other.close();
  }
});
