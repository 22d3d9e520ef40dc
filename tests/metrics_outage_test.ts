/**
 * `token_grants_total` counts the error the token endpoint answered, over real HTTP: a grant the
 * store could not serve (its database down) is answered 503 `temporarily_unavailable`, and
 * counted so, not as `server_error`.
 */

import assert from "node:assert/strict";
import { issueTokens, makeTestAppOn, TEST_REDIRECT } from "./_helpers.ts";
import { switchableKv } from "./_switchable_kv.ts";

const METRICS_TOKEN = "metrics-token-that-is-at-least-32-bytes!";

Deno.test("metrics: a token grant refused for a store outage counts as temporarily_unavailable", async () => {
  const kv = switchableKv(await Deno.openKv(":memory:"));
  const t = await makeTestAppOn(kv, { env: { METRICS_TOKEN } });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request, info) => t.app(request, info),
  );
  const base = `http://127.0.0.1:${server.addr.port}`;
  try {
    const { refresh_token } = await issueTokens(t);
    kv.unavailable = true;
    const refused = await fetch(`${base}/token`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "refresh_token",
        refresh_token,
        client_id: "client-1",
        redirect_uri: TEST_REDIRECT,
      }),
    });
    assert.equal(refused.status, 503);
    assert.equal((await refused.json()).error, "temporarily_unavailable");
    kv.unavailable = false;

    const scrape = await fetch(`${base}/metrics`, {
      headers: { Authorization: `Bearer ${METRICS_TOKEN}` },
    });
    const text = await scrape.text();
    const refreshes = text.split("\n").filter((line) =>
      line.startsWith('gitlab_mcp_auth_token_grants_total{grant_type="refresh_token"')
    );
    assert.deepEqual(refreshes, [
      'gitlab_mcp_auth_token_grants_total{grant_type="refresh_token",outcome="temporarily_unavailable"} 1',
    ]);
  } finally {
    await server.shutdown();
    t.close();
    kv.close();
  }
});
