/**
 * Machine clients in tests: MACHINE_ACCESS_FILE written to a temporary file, clients added the
 * way `admin clients add` adds them (its command, over the test app's store), and RFC 7523
 * client assertions signed here with keys the test made.
 */

import assert from "node:assert/strict";
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from "jose";
import { runStoreCommand } from "../src/admin/commands.ts";
import { silentLogger } from "../src/logger.ts";
import type { Store } from "../src/store/mod.ts";
import { TEST_BASE, type TestApp } from "./_helpers.ts";

/** A MACHINE_ACCESS_FILE holding `clients` rules (and `ci` ones, when given); its path. */
export async function writeAccessFile(
  clients: Record<string, unknown>[],
  ci: Record<string, unknown>[] = [],
): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "machine-access-" });
  const path = `${dir}/machine-access.json`;
  await Deno.writeTextFile(path, JSON.stringify({ clients, ci }));
  return path;
}

/**
 * PORT and a BASE_URL naming it, for a service process that serves private_key_jwt (which needs
 * BASE_URL) at the address it announces.
 */
export function baseUrlEnv(): { PORT: string; BASE_URL: string } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return { PORT: String(port), BASE_URL: `http://127.0.0.1:${port}` };
}

/** A key pair of `alg`, its public JWK (with `kid`) and the private key. */
export async function clientKeyPair(
  alg: "ES256" | "RS256" | "EdDSA" = "ES256",
  kid: string = alg,
) {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  const jwk = { ...await exportJWK(publicKey), kid, alg };
  return { alg, kid, jwk, publicKey, privateKey };
}

export type ClientKey = Awaited<ReturnType<typeof clientKeyPair>>;

/** Runs `admin clients add` over `store`; the one JSON line it printed, parsed. */
export async function addClient(
  store: Store,
  options: { id?: string; name?: string; jwks?: { keys: JsonWebKey[] }; secret?: boolean },
): Promise<{ client_id: string; client_secret?: string }> {
  const printed: string[] = [];
  let credential: { jwksFile: string } | { secret: true } = { secret: true };
  if (options.jwks) {
    const file = await Deno.makeTempFile({ suffix: ".json" });
    await Deno.writeTextFile(file, JSON.stringify(options.jwks));
    credential = { jwksFile: file };
  }
  const code = await runStoreCommand({
    name: "clients add",
    clientName: options.name ?? "robot",
    grant: "client_credentials",
    clientId: options.id,
    credential,
  }, {
    store,
    baseUrl: TEST_BASE,
    logger: silentLogger,
    print: (line) => printed.push(line),
    kvFileSize: () => Promise.resolve(undefined),
  });
  assert.equal(code, 0);
  assert.equal(printed.length, 1, printed.join("\n"));
  return JSON.parse(printed[0]);
}

/** A client assertion for `clientId` signed with `key`, claims and header overridden. */
export function assertion(
  key: ClientKey,
  clientId: string,
  nowMs: number,
  overrides: JWTPayload & { [claim: string]: unknown } = {},
  header: Record<string, unknown> = {},
): Promise<string> {
  const now = Math.floor(nowMs / 1000);
  const claims: JWTPayload = {
    iss: clientId,
    sub: clientId,
    aud: TEST_BASE,
    iat: now,
    exp: now + 60,
    jti: crypto.randomUUID(),
    ...overrides,
  };
  for (const [name, value] of Object.entries(claims)) {
    if (value === undefined) delete claims[name];
  }
  return new SignJWT(claims)
    .setProtectedHeader({ alg: key.alg, kid: key.kid, ...header })
    .sign(key.privateKey);
}

/** The form of a client_credentials request authenticated by `clientAssertion`. */
export function assertionForm(clientAssertion: string, extra: Record<string, string> = {}) {
  return {
    grant_type: "client_credentials",
    client_assertion_type: "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
    client_assertion: clientAssertion,
    ...extra,
  };
}

/** `Authorization: Basic` of a client id and secret, each form-encoded (RFC 6749 §2.3.1). */
export function basic(clientId: string, secret: string): Record<string, string> {
  const encode = (text: string) => new URLSearchParams({ v: text }).toString().slice(2);
  return { Authorization: `Basic ${btoa(`${encode(clientId)}:${encode(secret)}`)}` };
}

/** A client_credentials access token for a client `robot` added (with a secret) to `t`'s store. */
export async function clientCredentialsToken(t: Pick<TestApp, "app" | "store">): Promise<string> {
  const { client_id, client_secret } = await addClient(t.store, { id: "robot", secret: true });
  const response = await t.app(
    new Request(`${TEST_BASE}/token`, {
      method: "POST",
      headers: {
        "Content-Type": "application/x-www-form-urlencoded",
        ...basic(client_id, client_secret ?? ""),
      },
      body: new URLSearchParams({ grant_type: "client_credentials" }),
    }),
  );
  assert.equal(response.status, 200);
  return (await response.json()).access_token;
}
