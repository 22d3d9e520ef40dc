/**
 * A token signed with one of our keys whose `sid` is longer than any store key may be (a holder
 * of JWT_SECRET, such as a shared-secret resource server, can sign one; the service never does)
 * names no session: the gateway answers 401 `invalid_token`, /introspect `{"active": false}`,
 * /revoke 200, never a 500 from the store refusing the key.
 */

import assert from "node:assert/strict";
import { decodeJwt, SignJWT } from "jose";
import { issueTokens, TEST_SECRET } from "./_helpers.ts";
import { serveTestApp } from "./_served_app.ts";

const CALLER = "resource-server-introspection-caller-32-bytes+";

Deno.test("a signed token naming a session id no store key can hold is refused, never a 500", async () => {
  const service = await serveTestApp({
    MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
    INTROSPECTION_TOKENS: CALLER,
  });
  try {
    const claims = decodeJwt((await issueTokens(service.current())).access_token);
    const token = await new SignJWT({ ...claims, sid: "s".repeat(5000) })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .sign(new TextEncoder().encode(TEST_SECRET));
    const form = (fields: Record<string, string>) => ({
      "Content-Type": "application/x-www-form-urlencoded",
      ...fields,
    });

    const gateway = await fetch(`${service.url}/mcp`, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    assert.equal(gateway.status, 401);
    assert.equal((await gateway.json()).error, "invalid_token");

    const introspection = await fetch(`${service.url}/introspect`, {
      method: "POST",
      headers: form({ Authorization: `Bearer ${CALLER}` }),
      body: new URLSearchParams({ token }),
    });
    assert.equal(introspection.status, 200);
    assert.deepEqual(await introspection.json(), { active: false });

    const revocation = await fetch(`${service.url}/revoke`, {
      method: "POST",
      headers: form({}),
      body: new URLSearchParams({ token }),
    });
    assert.equal(revocation.status, 200);
    await revocation.body?.cancel();
  } finally {
    await service.close();
  }
});
