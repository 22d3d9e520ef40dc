/**
 * Verifiers that are not ours, over HTTP against a served app: npm jose's createRemoteJWKSet in
 * a Node process verifies our ES256 and EdDSA tokens across a key rotation; the Node and Deno
 * resource-server examples (deploy/examples/, docs/resource-servers.md) run and accept and refuse
 * as they say (a machine caller's token, and one naming no resource, among the refused).
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import type { AccessTokenClaims } from "../src/jwt.ts";
import { issueTokens } from "./_helpers.ts";
import { freePort, lockedJoseVersion, startNodeServer, waitUntilListening } from "./_node.ts";
import { serveTestApp } from "./_served_app.ts";
import { type Algorithm, freshKeys, signingEnv } from "./_signing_keys.ts";
import { denoRunArgs } from "./_service.ts";
import { clientCredentialsToken, writeAccessFile } from "./_machine_clients.ts";

const VERIFIER = new URL("./_node_verifier.mjs", import.meta.url);
const NODE_EXAMPLE = new URL("../deploy/examples/node/resource_server.mjs", import.meta.url);
const DENO_EXAMPLE = new URL("../deploy/examples/resource_server_deno.ts", import.meta.url);
const CALLER = "the-example-resource-server-secret-32-bytes";

async function post(
  url: string,
  body = "",
): Promise<{ status: number; body: Record<string, string> }> {
  const response = await fetch(url, { method: "POST", body });
  return { status: response.status, body: await response.json() };
}

async function call(url: string, token?: string): Promise<Response> {
  const response = await fetch(`${url}/mcp`, {
    method: "POST",
    headers: token === undefined ? {} : { Authorization: `Bearer ${token}` },
  });
  await response.body?.cancel();
  return response;
}

for (const algorithm of ["ES256", "EdDSA"] as Algorithm[]) {
  Deno.test(`node jose verifies our ${algorithm} tokens across a rotation`, async () => {
    const [old, next] = await freshKeys(algorithm, 2);
    const service = await serveTestApp(signingEnv(algorithm, [old]));
    const node = await startNodeServer(VERIFIER, { AUTH_ISSUER: service.url });
    try {
      const oldToken = (await issueTokens(service.current())).access_token;
      assert.deepEqual(await post(`${node.url}/verify`, oldToken), {
        status: 200,
        body: { kid: old.kid },
      });

      // 1. The new key is published second; verifiers pick it up within the cache time.
      await service.restart(signingEnv(algorithm, [old, next]));
      await post(`${node.url}/reload`);
      // 2. It moves first and signs; tokens of the old key still verify.
      const newToken =
        (await issueTokens(await service.restart(signingEnv(algorithm, [next, old]))))
          .access_token;
      assert.deepEqual(await post(`${node.url}/verify`, newToken), {
        status: 200,
        body: { kid: next.kid },
      });
      assert.deepEqual(await post(`${node.url}/verify`, oldToken), {
        status: 200,
        body: { kid: old.kid },
      });
      // 3. The old key is removed: its tokens no longer verify.
      await service.restart(signingEnv(algorithm, [next]));
      await post(`${node.url}/reload`);
      const refused = await post(`${node.url}/verify`, oldToken);
      assert.equal(refused.status, 401);
      assert.equal(refused.body.code, "ERR_JWKS_NO_MATCHING_KEY");
      assert.deepEqual(await post(`${node.url}/verify`, newToken), {
        status: 200,
        body: { kid: next.kid },
      });
    } finally {
      await node.close();
      await service.close();
    }
  });
}

Deno.test("docs' Node example (deploy/examples) accepts our ES256 tokens and refuses others", async () => {
  const accessFile = await writeAccessFile([{ client_id: "robot", servers: ["default"] }]);
  const service = await serveTestApp({
    ...signingEnv("ES256", await freshKeys("ES256", 1)),
    MACHINE_ACCESS_FILE: accessFile,
  });
  const node = await startNodeServer(NODE_EXAMPLE, { AUTH_ISSUER: service.url });
  try {
    const { access_token } = await issueTokens(service.current());
    const machine = await clientCredentialsToken(service.current());
    const { resource: _dropped, iat: _iat, exp: _exp, ...claims } = decodeJwt(access_token);
    const t = service.current();
    const unbound = await t.deps.oauth!.signer.sign(
      claims as unknown as AccessTokenClaims,
      t.clock.now(),
      t.config.accessTokenTtlSeconds,
    );
    const accepted = await fetch(`${node.url}/mcp`, {
      headers: { Authorization: `Bearer ${access_token}` },
    });
    assert.equal(accepted.status, 200);
    assert.deepEqual(await accepted.json(), { user: "ada", client: "client-1" });
    for (const token of [undefined, "garbage", access_token.slice(0, -3), machine, unbound]) {
      const refused = await call(node.url, token);
      assert.equal(refused.status, 401);
      assert.match(refused.headers.get("www-authenticate") ?? "", /error="invalid_token"/);
    }
  } finally {
    await node.close();
    await service.close();
  }
});

Deno.test("docs' Deno example (deploy/examples) works in both modes against a running service", async () => {
  const service = await serveTestApp({
    ...signingEnv("EdDSA", await freshKeys("EdDSA", 1)),
    INTROSPECTION_TOKENS: CALLER,
  });
  try {
    const modes: Record<string, string>[] = [{}, { INTROSPECTION_TOKEN: CALLER }];
    for (const mode of modes) {
      const port = String(freePort());
      const child = new Deno.Command(Deno.execPath(), {
        args: denoRunArgs(DENO_EXAMPLE.pathname),
        env: { AUTH_ISSUER: service.url, PORT: port, ...mode },
        stdout: "null",
        stderr: "null",
      }).spawn();
      const url = `http://127.0.0.1:${port}`;
      try {
        await waitUntilListening(Number(port));
        const { access_token } = await issueTokens(service.current());
        const accepted = await fetch(url, { headers: { Authorization: `Bearer ${access_token}` } });
        assert.equal(accepted.status, 200, JSON.stringify(mode));
        assert.deepEqual(await accepted.json(), { user: "ada", client: "client-1" });
        assert.equal((await call(url, "garbage")).status, 401);
        assert.equal((await call(url)).status, 401);
      } finally {
        child.kill();
        await child.status;
      }
    }
  } finally {
    await service.close();
  }
});

Deno.test("the Node example's package.json declares the jose it is tested with (npm install gets it)", async () => {
  const manifest = JSON.parse(await Deno.readTextFile(new URL("package.json", NODE_EXAMPLE)));
  assert.equal(manifest.scripts.start, "node resource_server.mjs");
  const range = manifest.dependencies.jose as string;
  const [major, minor, patch] = (await lockedJoseVersion()).split(".").map(Number);
  // A caret range admits the tested version: same major, not newer than it.
  const [, rMajor, rMinor, rPatch] = range.match(/^\^(\d+)\.(\d+)\.(\d+)$/)?.map(Number) ?? [];
  assert.equal(rMajor, major, range);
  assert.ok(
    rMinor < minor || (rMinor === minor && rPatch <= patch),
    `${range} admits ${major}.${minor}.${patch}`,
  );
});
