/**
 * What `createResourceGuard`'s remote modes (`{ jwksUrl }`, `{ introspection }`) refuse, against
 * a running service over HTTP: a machine caller's token (its rule, tools and deletion are the
 * gateway's to enforce, as `/introspect` already says by answering it inactive), a token bound to
 * another MCP server of MCP_SERVERS_FILE (RFC 8707, which `/introspect` now answers with the
 * token's `resource`), a token too long to be ours (401, asked of nobody, not a 503 from the
 * service's 413), a token naming no resource (RFC 9068 §4: the audience must name this resource;
 * every token the service signs names one), and a key set that cannot be had fetched at most once
 * per retry wait, not once per request.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { createResourceGuard, type VerifiedAccess } from "../mod.ts";
import type { AccessTokenClaims } from "../src/jwt.ts";
import { exchange, issueCode, issueTokens, type TestApp } from "./_helpers.ts";
import { serveTestApp } from "./_served_app.ts";
import { freshKeys, signingEnv } from "./_signing_keys.ts";
import { clientCredentialsToken, writeAccessFile } from "./_machine_clients.ts";
import { KEY_SET_RETRY_MS } from "../src/library/remote_guard.ts";

const CALLER = "a-resource-server-secret-of-32-bytes-or-more";

function withBearer(token: string): Request {
  return new Request("http://resource.test/mcp", {
    method: "POST",
    headers: { Authorization: `Bearer ${token}` },
  });
}

/** A fetch that counts its requests. */
function countingFetch(): { fetch: typeof fetch; count: () => number } {
  let count = 0;
  return {
    fetch: (input, init) => {
      count++;
      return fetch(input, init);
    },
    count: () => count,
  };
}

/** The refusal's status and challenge error, its body read. */
async function refused(result: VerifiedAccess | Response): Promise<[number, string]> {
  assert.ok(result instanceof Response, `refused, not ${JSON.stringify(result)}`);
  const challenge = result.headers.get("www-authenticate") ?? "";
  await result.body?.cancel();
  return [result.status, challenge.match(/error="([^"]+)"/)?.[1] ?? ""];
}

Deno.test("remote guard { jwksUrl }: a machine caller's token (client credentials) is refused, as introspection refuses it", async () => {
  const accessFile = await writeAccessFile([{ client_id: "robot", servers: ["default"] }]);
  const service = await serveTestApp({
    ...signingEnv("ES256", await freshKeys("ES256", 1)),
    MACHINE_ACCESS_FILE: accessFile,
  });
  try {
    const t = service.current();
    const machine = await clientCredentialsToken(t);
    assert.equal(decodeJwt(machine).sub, "client:robot");
    const guard = createResourceGuard({
      issuer: service.url,
      jwksUrl: `${service.url}/.well-known/jwks.json`,
      clock: t.clock,
    });
    assert.deepEqual(await refused(await guard.authenticate(withBearer(machine))), [
      401,
      "invalid_token",
    ]);
    const person = await guard.authenticate(withBearer((await issueTokens(t)).access_token));
    assert.ok(!(person instanceof Response), "a person's token of the same key passes");
  } finally {
    await service.close();
  }
});

Deno.test("remote guard { introspection }: a token bound to another MCP server is refused (RFC 8707)", async () => {
  const dir = await Deno.makeTempDir();
  const serversFile = `${dir}/servers.yaml`;
  await Deno.writeTextFile(serversFile, "servers:\n  - name: docs\n    url: http://127.0.0.1:9/\n");
  const service = await serveTestApp({
    INTROSPECTION_TOKENS: CALLER,
    MCP_UPSTREAM_URL: "http://127.0.0.1:9/",
    MCP_SERVERS_FILE: serversFile,
  });
  try {
    const t = service.current();
    const docs = `${service.url}/mcp/docs`;
    const code = await issueCode(t, { resource: docs });
    const { access_token } = await (await exchange(t, code, { resource: docs })).json();
    assert.equal(decodeJwt(access_token).resource, docs);
    const guardOf = (resource?: string) =>
      createResourceGuard({
        issuer: service.url,
        resource,
        introspection: { url: `${service.url}/introspect`, token: CALLER },
        clock: t.clock,
      });
    assert.deepEqual(await refused(await guardOf().authenticate(withBearer(access_token))), [
      401,
      "invalid_token",
    ]);
    const atDocs = await guardOf(docs).authenticate(withBearer(access_token));
    assert.ok(!(atDocs instanceof Response), "good at the server it was issued for");
  } finally {
    await service.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/** `token`'s claims signed again by the service without `resource`, as none of its versions signs. */
async function withoutResource(t: TestApp, token: string): Promise<string> {
  const { resource: _dropped, iat: _iat, exp: _exp, ...claims } = decodeJwt(token);
  return await t.deps.oauth!.signer.sign(
    claims as unknown as AccessTokenClaims,
    t.clock.now(),
    t.config.accessTokenTtlSeconds,
  );
}

Deno.test("remote guard { jwksUrl }: a token naming no resource is refused, even at the default resource", async () => {
  const service = await serveTestApp(signingEnv("EdDSA", await freshKeys("EdDSA", 1)));
  try {
    const t = service.current();
    const { access_token } = await issueTokens(t);
    assert.equal(decodeJwt(access_token).resource, `${service.url}/mcp`, "issued bound");
    const unbound = await withoutResource(t, access_token);
    const guardAt = (resource?: string) =>
      createResourceGuard({
        issuer: service.url,
        resource,
        jwksUrl: `${service.url}/.well-known/jwks.json`,
        clock: t.clock,
      });
    for (const resource of [undefined, `${service.url}/mcp/docs`, "https://elsewhere.test/mcp"]) {
      assert.deepEqual(await refused(await guardAt(resource).authenticate(withBearer(unbound))), [
        401,
        "invalid_token",
      ], `at ${resource ?? "the default resource"}`);
    }
    const bound = await guardAt().authenticate(withBearer(access_token));
    assert.ok(!(bound instanceof Response), "the token as issued passes");
  } finally {
    await service.close();
  }
});

Deno.test("remote guard { introspection }: a live token naming no resource is refused, even at the default resource", async () => {
  const service = await serveTestApp({ INTROSPECTION_TOKENS: CALLER });
  try {
    const t = service.current();
    const { access_token } = await issueTokens(t);
    const unbound = await withoutResource(t, access_token);
    const answer = await (await fetch(`${service.url}/introspect`, {
      method: "POST",
      headers: { Authorization: `Bearer ${CALLER}` },
      body: new URLSearchParams({ token: unbound }),
    })).json();
    assert.equal(answer.active, true, "its session is alive");
    assert.equal(answer.resource, undefined);
    const guardAt = (resource?: string) =>
      createResourceGuard({
        issuer: service.url,
        resource,
        introspection: { url: `${service.url}/introspect`, token: CALLER },
        clock: t.clock,
      });
    for (const resource of [undefined, `${service.url}/mcp/docs`]) {
      assert.deepEqual(await refused(await guardAt(resource).authenticate(withBearer(unbound))), [
        401,
        "invalid_token",
      ], `at ${resource ?? "the default resource"}`);
    }
    const bound = await guardAt().authenticate(withBearer(access_token));
    assert.ok(!(bound instanceof Response), "the token as issued passes");
  } finally {
    await service.close();
  }
});

Deno.test("remote guard { introspection }: a token too long to be ours is 401 invalid_token, asked of nobody", async () => {
  const service = await serveTestApp({ INTROSPECTION_TOKENS: CALLER });
  const requests = countingFetch();
  try {
    const guard = createResourceGuard({
      issuer: service.url,
      introspection: { url: `${service.url}/introspect`, token: CALLER },
      clock: service.current().clock,
      fetch: requests.fetch,
    });
    // Longer than the service's form limit (64 KiB): it would answer 413, not "inactive".
    const huge = `${"a".repeat(40_000)}.${"b".repeat(40_000)}.c`;
    assert.deepEqual(await refused(await guard.authenticate(withBearer(huge))), [
      401,
      "invalid_token",
    ]);
    assert.equal(requests.count(), 0);
  } finally {
    await service.close();
  }
});

Deno.test("remote guard { jwksUrl }: while no key set can be had, it is fetched at most once per retry wait, not per request", async () => {
  const service = await serveTestApp(signingEnv("EdDSA", await freshKeys("EdDSA", 1)));
  let down = true;
  // The service's JWKS behind a switch: 503 while down.
  const front = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    if (down) return new Response("down", { status: 503 });
    return fetch(`${service.url}${new URL(request.url).pathname}`);
  });
  const requests = countingFetch();
  try {
    const t = service.current();
    const guard = createResourceGuard({
      issuer: service.url,
      jwksUrl: `http://127.0.0.1:${front.addr.port}/.well-known/jwks.json`,
      clock: t.clock,
      fetch: requests.fetch,
    });
    const { access_token } = await issueTokens(t);
    for (let i = 0; i < 5; i++) {
      const answer = await guard.authenticate(withBearer(access_token));
      assert.ok(answer instanceof Response);
      assert.equal(answer.status, 503);
      assert.equal(answer.headers.get("retry-after"), "5");
      await answer.body?.cancel();
    }
    assert.equal(requests.count(), 1, "one fetch for five requests");
    down = false;
    t.clock.advance(KEY_SET_RETRY_MS);
    assert.ok(!((await guard.authenticate(withBearer(access_token))) instanceof Response));
    assert.equal(requests.count(), 2);
  } finally {
    await front.shutdown();
    await service.close();
  }
});

Deno.test("remote guard { jwksUrl }: a published key that cannot be imported refuses the token (401), it does not throw", async () => {
  const keys = await freshKeys("ES256", 1);
  const service = await serveTestApp(signingEnv("ES256", keys));
  const published = (await (await fetch(`${service.url}/.well-known/jwks.json`)).json()).keys[0];
  // The key under our kid, with operations WebCrypto will not import for verifying.
  const hostile = { keys: [{ ...published, key_ops: ["encrypt"] }] };
  const front = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json(hostile),
  );
  try {
    const t = service.current();
    const guard = createResourceGuard({
      issuer: service.url,
      jwksUrl: `http://127.0.0.1:${front.addr.port}/.well-known/jwks.json`,
      clock: t.clock,
    });
    const { access_token } = await issueTokens(t);
    assert.deepEqual(await refused(await guard.authenticate(withBearer(access_token))), [
      401,
      "invalid_token",
    ]);
  } finally {
    await front.shutdown();
    await service.close();
  }
});
