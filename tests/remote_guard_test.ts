/**
 * `createResourceGuard` in its two new modes against a running service over HTTP: `{ jwksUrl }`
 * verifies ES256/EdDSA tokens with the published keys (fetching the set again once for an
 * unknown kid, at most every 30 s, across a rotation), `{ introspection }` asks `/introspect`
 * and honours revocation after its short cache. Exactly one mode is required.
 */

import assert from "node:assert/strict";
import { decodeJwt, importJWK, SignJWT } from "jose";
import { createResourceGuard, type VerifiedAccess } from "../mod.ts";
import { issueTokens, TEST_BASE, TEST_SECRET } from "./_helpers.ts";
import { serveTestApp } from "./_served_app.ts";
import { type Algorithm, freshKeys, signingEnv } from "./_signing_keys.ts";
import { KEY_SET_REFETCH_INTERVAL_MS } from "../src/library/remote_guard.ts";

const CALLER = "a-resource-server-secret-of-32-bytes-or-more";

function withBearer(token: string | undefined): Request {
  return new Request("http://resource.test/mcp", {
    method: "POST",
    headers: token === undefined ? {} : { Authorization: `Bearer ${token}` },
  });
}

/** A fetch that counts the requests to each path. */
function countingFetch(): { fetch: typeof fetch; count: (path: string) => number } {
  const counts = new Map<string, number>();
  return {
    fetch: (input, init) => {
      const path = new URL(input instanceof Request ? input.url : input).pathname;
      counts.set(path, (counts.get(path) ?? 0) + 1);
      return fetch(input, init);
    },
    count: (path) => counts.get(path) ?? 0,
  };
}

async function refusal(result: VerifiedAccess | Response, status = 401): Promise<string> {
  assert.ok(result instanceof Response, "refused");
  assert.equal(result.status, status);
  const challenge = result.headers.get("www-authenticate") ?? "";
  await result.body?.cancel();
  return challenge;
}

for (const algorithm of ["ES256", "EdDSA"] as Algorithm[]) {
  Deno.test(`guard { jwksUrl } (${algorithm}): verifies over HTTP, refetches once for a new kid, at most every 30 s`, async () => {
    const [first, second] = await freshKeys(algorithm, 2);
    const service = await serveTestApp(signingEnv(algorithm, [first]));
    const requests = countingFetch();
    try {
      const t = service.current();
      const guard = createResourceGuard({
        jwksUrl: `${service.url}/.well-known/jwks.json`,
        issuer: service.url,
        clock: t.clock,
        fetch: requests.fetch,
      });
      const issued = await issueTokens(t);
      const claims = decodeJwt(issued.access_token);
      const access = await guard.authenticate(withBearer(issued.access_token));
      assert.ok(!(access instanceof Response), "accepted");
      assert.deepEqual(access, {
        user: { id: claims.sub, username: claims.gitlab_user },
        scopes: ["mcp:tools", "mcp:resources"],
        clientId: claims.client_id,
        sessionId: claims.sid,
      });
      assert.ok(!((await guard.authenticate(withBearer(issued.access_token))) instanceof Response));
      assert.equal(requests.count("/.well-known/jwks.json"), 1, "the set is kept");

      assert.equal(
        await refusal(await guard.authenticate(withBearer(undefined))),
        `Bearer resource_metadata="${service.url}/.well-known/oauth-protected-resource/mcp", scope="mcp:tools mcp:resources"`,
      );
      const hs256 = await new SignJWT(claims).setProtectedHeader({ alg: "HS256", kid: first.kid })
        .sign(new TextEncoder().encode(TEST_SECRET));
      assert.match(await refusal(await guard.authenticate(withBearer(hs256))), /invalid_token/);

      // Rotation: the new key is published second, then moved first.
      const published = await service.restart(signingEnv(algorithm, [first, second]));
      assert.ok(
        !((await guard.authenticate(
          withBearer((await issueTokens(published)).access_token),
        )) instanceof Response),
      );
      const moved = await service.restart(signingEnv(algorithm, [second, first]));
      const newToken = (await issueTokens(moved)).access_token;
      // Fetched moments ago: an unknown kid does not fetch again within 30 s.
      assert.match(await refusal(await guard.authenticate(withBearer(newToken))), /invalid_token/);
      assert.equal(requests.count("/.well-known/jwks.json"), 1);
      t.clock.advance(KEY_SET_REFETCH_INTERVAL_MS);
      assert.ok(
        !((await guard.authenticate(withBearer(newToken))) instanceof Response),
        "refetched",
      );
      assert.equal(requests.count("/.well-known/jwks.json"), 2);
      assert.ok(
        !((await guard.authenticate(withBearer(issued.access_token))) instanceof Response),
        "old key still listed",
      );

      // A forged kid refetches at most once per 30 s, however many tokens name it.
      t.clock.advance(KEY_SET_REFETCH_INTERVAL_MS);
      const [stranger] = await freshKeys(algorithm, 1);
      const forged = await new SignJWT(claims).setProtectedHeader({ alg: algorithm, kid: "forged" })
        .sign(await importJWK({ ...stranger, alg: algorithm }, algorithm));
      for (let i = 0; i < 5; i++) {
        assert.match(await refusal(await guard.authenticate(withBearer(forged))), /invalid_token/);
      }
      assert.equal(requests.count("/.well-known/jwks.json"), 3);

      const removed = await service.restart(signingEnv(algorithm, [second]));
      assert.ok(removed);
      t.clock.advance(300_000);
      assert.match(
        await refusal(await guard.authenticate(withBearer(issued.access_token))),
        /invalid_token/,
        "removed key",
      );
    } finally {
      await service.close();
    }
  });
}

Deno.test("guard { introspection }: accepts live tokens, caches briefly, then honours revocation", async () => {
  const service = await serveTestApp({ INTROSPECTION_TOKENS: CALLER });
  const requests = countingFetch();
  try {
    const t = service.current();
    const guard = createResourceGuard({
      introspection: { url: `${service.url}/introspect`, token: CALLER, cacheSeconds: 5 },
      issuer: service.url,
      clock: t.clock,
      fetch: requests.fetch,
    });
    const issued = await issueTokens(t);
    const claims = decodeJwt(issued.access_token);
    const access = await guard.authenticate(withBearer(issued.access_token));
    assert.deepEqual(access, {
      user: { id: claims.sub, username: claims.gitlab_user },
      scopes: ["mcp:tools", "mcp:resources"],
      clientId: claims.aud,
      sessionId: claims.sid,
    });
    const revoked = await t.app(
      new Request(`${TEST_BASE}/revoke`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: issued.refresh_token }),
      }),
    );
    assert.equal(revoked.status, 200);
    assert.ok(
      !((await guard.authenticate(withBearer(issued.access_token))) instanceof Response),
      "cached",
    );
    assert.equal(requests.count("/introspect"), 1);
    t.clock.advance(5_000);
    assert.match(
      await refusal(await guard.authenticate(withBearer(issued.access_token))),
      /invalid_token/,
    );
    assert.equal(requests.count("/introspect"), 2);
    assert.match(await refusal(await guard.authenticate(withBearer("garbage"))), /invalid_token/);
    // A space inside: refused before anyone is asked (each variant would be a new cache entry).
    const spaced = `${issued.access_token.slice(0, -4)} ${issued.access_token.slice(-4)}`;
    assert.match(await refusal(await guard.authenticate(withBearer(spaced))), /invalid_token/);
    assert.equal(requests.count("/introspect"), 3, "garbage was asked about; the spaced one not");

    const wrongCaller = createResourceGuard({
      introspection: { url: `${service.url}/introspect`, token: CALLER.replace("a-", "b-") },
      issuer: service.url,
      clock: t.clock,
    });
    await refusal(
      await wrongCaller.authenticate(withBearer((await issueTokens(t)).access_token)),
      503,
    );
  } finally {
    await service.close();
  }
});

Deno.test("createResourceGuard needs exactly one of jwtSecret, jwksUrl, introspection", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const issuer = "https://auth.example.com";
    const introspection = { url: `${issuer}/introspect`, token: CALLER };
    const jwksUrl = `${issuer}/.well-known/jwks.json`;
    for (
      const options of [
        { issuer },
        { issuer, jwksUrl, introspection },
        { issuer, kv, jwtSecret: TEST_SECRET, jwksUrl },
      ]
    ) {
      assert.throws(() => createResourceGuard(options as never), /exactly one of/);
    }
    assert.throws(
      () => createResourceGuard({ issuer, introspection: { ...introspection, token: "short" } }),
      /at least 32 bytes/,
    );
    assert.throws(
      () => createResourceGuard({ issuer, jwksUrl: "not a url" }),
      /jwksUrl: is not a valid URL/,
    );
    assert.ok(createResourceGuard({ issuer, jwksUrl }));
    assert.ok(createResourceGuard({ issuer, introspection }));
  } finally {
    kv.close();
  }
});
