/**
 * A token of a signing key the service no longer holds is refused by naming the key, not as a
 * malformed token (issue 33 §1.9): after a rotation removes a key, its tokens' holders read why.
 */

import assert from "node:assert/strict";
import { gatewayApp, mcpRequest, startScripted } from "./_gateway.ts";
import { makeTestApp } from "./_helpers.ts";
import { freshKeys, signingEnv } from "./_signing_keys.ts";

Deno.test("gateway: a token of a retired signing key is refused as an unknown key", async () => {
  const upstream = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  const [retired, current] = await freshKeys("ES256", 2);
  const before = await gatewayApp(upstream.url, signingEnv("ES256", [retired]));
  const after = await makeTestApp({
    env: { MCP_UPSTREAM_URL: upstream.url, ...signingEnv("ES256", [current]) },
  });
  try {
    const response = await mcpRequest(after, before.accessToken, { body: "{}" });
    assert.equal(response.status, 401);
    const challenge = response.headers.get("www-authenticate") ?? "";
    assert.match(challenge, /error="invalid_token"/);
    assert.match(challenge, /key is not known/, challenge);
    assert.doesNotMatch(challenge, /malformed/);
    await response.body?.cancel();
  } finally {
    before.t.close();
    after.close();
    await upstream.close();
  }
});
