/**
 * ES256/EdDSA access tokens are RFC 9068 JWT access tokens: besides `jti` and `client_id` their
 * header says `typ: at+jwt` (§2.1), so a resource server validating by that profile accepts them.
 * The validator is oauth4webapi's `validateJwtAccessToken` (RFC 9068 §4, explicit typing of
 * RFC 8725 §3.11), fetching the key set over HTTP from the served app. HS256 tokens carry only
 * the spec's claims, are no RFC 9068 tokens, and keep `typ: JWT`.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { decodeProtectedHeader } from "jose";
import { issueTokens } from "./_helpers.ts";
import { serveTestApp } from "./_served_app.ts";
import { type Algorithm, freshKeys, signingEnv } from "./_signing_keys.ts";

/** oauth4webapi refuses http:// unless told; the served app is on loopback. */
const INSECURE = { [oauth.allowInsecureRequests]: true } as const;

for (const algorithm of ["ES256", "EdDSA"] as Algorithm[]) {
  Deno.test(`${algorithm}: an RFC 9068 validator (oauth4webapi) accepts our access token`, async () => {
    const keys = await freshKeys(algorithm, 1);
    // `aud` the resource (RFC 9068 style), as a validator comparing `aud` needs.
    const service = await serveTestApp({
      ...signingEnv(algorithm, keys),
      ACCESS_TOKEN_AUDIENCE: "resource",
    });
    try {
      const issuer = new URL(service.url);
      const as = await oauth.processDiscoveryResponse(
        issuer,
        await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...INSECURE }),
      );
      const { access_token } = await issueTokens(service.current());
      assert.equal(decodeProtectedHeader(access_token).typ, "at+jwt");
      const resource = `${service.url}/mcp`;
      const request = new Request(resource, {
        headers: { Authorization: `Bearer ${access_token}` },
      });
      const claims = await oauth.validateJwtAccessToken(as, request, resource, INSECURE);
      assert.equal(claims.aud, resource);
      assert.equal(typeof claims.client_id, "string");
      assert.equal(typeof claims.jti, "string");
    } finally {
      await service.close();
    }
  });
}

Deno.test("HS256: tokens keep typ JWT (only the spec's claims: no RFC 9068 token)", async () => {
  const service = await serveTestApp({});
  try {
    const { access_token } = await issueTokens(service.current());
    assert.deepEqual(decodeProtectedHeader(access_token), { alg: "HS256", typ: "JWT" });
  } finally {
    await service.close();
  }
});
