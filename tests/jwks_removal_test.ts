/**
 * A signing key removed from the service (docs/resource-servers.md, "Rotating a signing key"):
 * the service refuses its tokens at once (asymmetric_tokens_test.ts); the guard's JWKS mode once
 * it has fetched the set again after its cache time, and not while the service cannot be reached
 * (it keeps its copy).
 */

import assert from "node:assert/strict";
import { createResourceGuard } from "../mod.ts";
import { issueTokens } from "./_helpers.ts";
import { serveTestApp } from "./_served_app.ts";
import { freshKeys, signingEnv } from "./_signing_keys.ts";
import { JWKS_MAX_AGE_SECONDS } from "../src/routes/jwks.ts";

function withBearer(token: string): Request {
  return new Request("http://resource.test/mcp", { headers: { Authorization: `Bearer ${token}` } });
}

Deno.test("a removed key: refused by the JWKS guard after its cache time, once it can fetch the set", async () => {
  const [leaked, next] = await freshKeys("EdDSA", 2);
  const service = await serveTestApp(signingEnv("EdDSA", [leaked, next]));
  let reachable = true;
  try {
    const t = service.current();
    const guard = createResourceGuard({
      jwksUrl: `${service.url}/.well-known/jwks.json`,
      issuer: service.url,
      clock: t.clock,
      fetch: (input, init) =>
        reachable ? fetch(input, init) : Promise.reject(new TypeError("unreachable")),
    });
    const token = (await issueTokens(t)).access_token;
    assert.ok(!((await guard.authenticate(withBearer(token))) instanceof Response));

    await service.restart(signingEnv("EdDSA", [next]));
    // Within its cache time the guard still holds the key.
    assert.ok(!((await guard.authenticate(withBearer(token))) instanceof Response));
    t.clock.advance(JWKS_MAX_AGE_SECONDS * 1000);
    reachable = false;
    assert.ok(
      !((await guard.authenticate(withBearer(token))) instanceof Response),
      "the service unreachable: the copy is kept",
    );
    reachable = true;
    t.clock.advance(JWKS_MAX_AGE_SECONDS * 1000);
    const refused = await guard.authenticate(withBearer(token));
    assert.ok(refused instanceof Response);
    assert.equal(refused.status, 401);
    await refused.body?.cancel();
  } finally {
    await service.close();
  }
});
