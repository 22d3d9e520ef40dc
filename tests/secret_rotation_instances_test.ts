/**
 * Rotating JWT_SECRET across several instances sharing one store (docs/security.md "Rotating
 * JWT_SECRET"): while instances are restarted one by one, an instance still on the old settings
 * meets tokens and sessions written by one already on the new. Done in one step, that instance
 * refuses the new instance's access tokens and reads a session it resealed as gone (the user
 * signs in again); done in the two steps the docs give (first the new secret as
 * JWT_SECRET_PREVIOUS everywhere, then the swap), every instance reads what any other wrote.
 * A signing key's rotation (docs/resource-servers.md) likewise takes each step on every instance
 * before the next.
 */

import assert from "node:assert/strict";
import { mcpRequest, startScripted } from "./_gateway.ts";
import {
  FakeClock,
  FakeUpstream,
  issueTokens,
  makeTestApp,
  refresh,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { freshKeys, signingEnv } from "./_signing_keys.ts";

const OLD = TEST_SECRET;
const NEW = "the-new-jwt-secret-after-the-rotation-32-bytes+";

/** Instances over one KV file, with the clock and GitLab they share. */
async function instances(
  upstreamUrl: string,
): Promise<{ start(env: Record<string, string>): Promise<TestApp>; close(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "secret-rotation-" });
  const clock = new FakeClock();
  const upstream = new FakeUpstream();
  const apps: TestApp[] = [];
  return {
    async start(env) {
      const app = await makeTestApp({
        env: { MCP_UPSTREAM_URL: upstreamUrl, ...env },
        kvPath: `${dir}/kv`,
        clock,
        upstream,
      });
      apps.push(app);
      return app;
    },
    async close() {
      for (const app of apps) app.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function gatewayStatus(t: TestApp, token: string): Promise<number> {
  const response = await mcpRequest(t, token, { body: "{}" });
  await response.body?.cancel();
  return response.status;
}

/** A refresh at `t`: the new pair, or the error it answered. */
async function refreshedAt(
  t: TestApp,
  refreshToken: string,
): Promise<{ status: number; access_token?: string; refresh_token?: string; error?: string }> {
  const response = await refresh(t, refreshToken);
  return { status: response.status, ...await response.json() };
}

Deno.test("JWT_SECRET rotation across instances: in one step an instance not yet restarted logs users out", async () => {
  const mcp = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  const rig = await instances(mcp.url);
  try {
    const notYet = await rig.start({ JWT_SECRET: OLD });
    const rotated = await rig.start({ JWT_SECRET: NEW, JWT_SECRET_PREVIOUS: OLD });
    const signedIn = await issueTokens(notYet);
    const renewed = await refreshedAt(rotated, signedIn.refresh_token);
    assert.equal(renewed.status, 200);
    assert.equal(await gatewayStatus(notYet, renewed.access_token ?? ""), 401);
    // The session was sealed again under the new secret's key: gone for the old instance.
    const again = await refreshedAt(notYet, renewed.refresh_token ?? "");
    assert.deepEqual([again.status, again.error], [400, "invalid_grant"]);
  } finally {
    await rig.close();
    await mcp.close();
  }
});

Deno.test("JWT_SECRET rotation across instances in two steps: every instance reads what the others wrote", async () => {
  const mcp = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  const rig = await instances(mcp.url);
  try {
    const before = await rig.start({ JWT_SECRET: OLD });
    let tokens = await issueTokens(before);
    // Step 1, restarted one by one: the new secret verifies and opens, the old one still signs.
    const announced = await rig.start({ JWT_SECRET: OLD, JWT_SECRET_PREVIOUS: NEW });
    for (const [at, other] of [[announced, before], [before, announced]]) {
      const renewed = await refreshedAt(at, tokens.refresh_token);
      assert.equal(renewed.status, 200);
      assert.equal(await gatewayStatus(other, renewed.access_token ?? ""), 200);
      tokens = renewed as typeof tokens;
    }
    // Step 2, restarted one by one once step 1 is everywhere: the swap.
    const rotated = await rig.start({ JWT_SECRET: NEW, JWT_SECRET_PREVIOUS: OLD });
    for (const [at, other] of [[rotated, announced], [announced, rotated], [rotated, announced]]) {
      const renewed = await refreshedAt(at, tokens.refresh_token);
      assert.equal(renewed.status, 200, JSON.stringify(renewed));
      assert.equal(await gatewayStatus(other, renewed.access_token ?? ""), 200);
      assert.equal(await gatewayStatus(at, renewed.access_token ?? ""), 200);
      tokens = renewed as typeof tokens;
    }
    // JWT_SECRET_PREVIOUS removed once no instance signs with the old secret and its tokens expired.
    const after = await rig.start({ JWT_SECRET: NEW });
    const renewed = await refreshedAt(rotated, tokens.refresh_token);
    assert.equal(await gatewayStatus(after, renewed.access_token ?? ""), 200);
    assert.equal((await refreshedAt(after, renewed.refresh_token ?? "")).status, 200);
  } finally {
    await rig.close();
    await mcp.close();
  }
});

Deno.test("signing key rotation across instances: each step on every instance before the next", async () => {
  const mcp = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  const rig = await instances(mcp.url);
  const [old, next] = await freshKeys("ES256", 2);
  try {
    const notYet = await rig.start(signingEnv("ES256", [old]));
    const published = await rig.start(signingEnv("ES256", [old, next]));
    const moved = await rig.start(signingEnv("ES256", [next, old]));
    const signedWithNext = (await issueTokens(moved)).access_token;
    // Moved first on one instance while another has not published the key: refused there.
    assert.equal(await gatewayStatus(notYet, signedWithNext), 401);
    // Once every instance publishes it, each verifies what the others sign.
    assert.equal(await gatewayStatus(published, signedWithNext), 200);
    assert.equal(await gatewayStatus(moved, (await issueTokens(published)).access_token), 200);
  } finally {
    await rig.close();
    await mcp.close();
  }
});
