/**
 * ACCESS_TOKEN_ALG with SIGNING_KEYS / SIGNING_KEYS_FILE: every unusable key stops start-up
 * with one line naming the variable (and never the private part); `admin keys generate --alg`
 * prints a key the service accepts.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { runAdminCli } from "./_service.ts";
import { freshKeys, signingEnv } from "./_signing_keys.ts";

const BASE_ENV = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET };

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig({ ...BASE_ENV, ...env });
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    assert.doesNotMatch(error.message, /\n/, "one line");
    return error;
  }
  assert.fail("the configuration was accepted");
}

Deno.test("signing keys: HS256 stays the default and takes no keys", async () => {
  const config = loadConfig(BASE_ENV);
  assert.equal(config.accessTokenAlg, "HS256");
  const [key] = await freshKeys("ES256", 1);
  const error = configError({ SIGNING_KEYS: JSON.stringify([key]) });
  assert.match(error.message, /^SIGNING_KEYS: is set but ACCESS_TOKEN_ALG is HS256/);
});

Deno.test("signing keys: a missing, malformed, public-only or wrong-type key stops start-up", async () => {
  const [es] = await freshKeys("ES256", 1);
  const [ed] = await freshKeys("EdDSA", 1);
  const { d: _d, ...publicOnly } = es;
  const cases: [Record<string, string>, RegExp][] = [
    [{ ACCESS_TOKEN_ALG: "ES256" }, /^SIGNING_KEYS: is required with ACCESS_TOKEN_ALG=ES256/],
    [{ ACCESS_TOKEN_ALG: "RS256" }, /^ACCESS_TOKEN_ALG: must be one of HS256, ES256, EdDSA/],
    [{ ACCESS_TOKEN_ALG: "ES256", SIGNING_KEYS: "{not json" }, /not JSON/],
    [{ ACCESS_TOKEN_ALG: "ES256", SIGNING_KEYS: "[]" }, /non-empty JSON array/],
    [{ ACCESS_TOKEN_ALG: "ES256", SIGNING_KEYS: "[42]" }, /key 1 is not a JWK object/],
    [signingEnv("ES256", [publicOnly as typeof es]), /"ES256-0" is a public key/],
    [signingEnv("ES256", [{ ...es, kid: "" }]), /key 1 has no kid/],
    [signingEnv("ES256", [es, { ...es }]), /two keys have the kid "ES256-0"/],
    [signingEnv("ES256", [ed]), /key "EdDSA-0" is an EdDSA key but ACCESS_TOKEN_ALG is ES256/],
    [signingEnv("EdDSA", [ed, es]), /key "ES256-0" is an ES256 key but ACCESS_TOKEN_ALG is EdDSA/],
    [signingEnv("ES256", [{ ...es, d: es.d.slice(4) }]), /is not a valid P-256 private key/],
    [signingEnv("EdDSA", [{ ...ed, x: es.x }]), /public part does not match its private "d"/],
    [
      signingEnv("ES256", [{ ...es, kty: "RSA" } as unknown as typeof es]),
      /must be an EC P-256 \(ES256\) or OKP Ed25519 \(EdDSA\) key/,
    ],
    [{ ACCESS_TOKEN_ALG: "ES256", SIGNING_KEYS_FILE: "/nonexistent/keys.json" }, /cannot read/],
  ];
  for (const [env, expected] of cases) {
    const error = configError(env);
    assert.match(error.message, expected, JSON.stringify(env));
    for (const secret of [es.d, ed.d]) assert.ok(!error.message.includes(secret), "no d echoed");
  }
});

Deno.test("signing keys: a key marked for encryption, for other operations or another alg stops start-up (RFC 7517 §4.2–4.4)", async () => {
  const [es] = await freshKeys("ES256", 1);
  const [ed] = await freshKeys("EdDSA", 1);
  const refused: [Record<string, string>, RegExp][] = [
    [signingEnv("ES256", [{ ...es, use: "enc" } as typeof es]), /"ES256-0" has "use" "enc"/],
    [
      signingEnv("EdDSA", [{ ...ed, key_ops: ["verify"] } as typeof ed]),
      /"EdDSA-0" has "key_ops" \["verify"\] without "sign"/,
    ],
    [
      signingEnv("ES256", [{ ...es, key_ops: "sign" } as typeof es]),
      /has "key_ops" "sign" without/,
    ],
    [
      signingEnv("ES256", [{ ...es, alg: "ES384" } as typeof es]),
      /^SIGNING_KEYS: key "ES256-0" has "alg" "ES384", but an ES256 key signs ES256/,
    ],
    [
      signingEnv("EdDSA", [{ ...ed, alg: "ES256" } as typeof ed]),
      /has "alg" "ES256", but an EdDSA/,
    ],
  ];
  for (const [env, expected] of refused) {
    const error = configError(env);
    assert.match(error.message, expected, JSON.stringify(env));
    for (const secret of [es.d, ed.d]) assert.ok(!error.message.includes(secret), "no d echoed");
  }
  // Marked for what the service does with it: accepted.
  const marked = [
    { ...es, use: "sig", key_ops: ["sign", "verify"], alg: "ES256" },
    { ...ed, kid: "ed", alg: "Ed25519" },
  ];
  assert.equal(
    loadConfig({ ...BASE_ENV, ...signingEnv("ES256", [marked[0]]) }).signingKeys?.length,
    1,
  );
  assert.equal(
    loadConfig({ ...BASE_ENV, ...signingEnv("EdDSA", [marked[1]]) }).signingKeys?.length,
    1,
  );
  // The operator's check says it too, in one line, from a file as from the variable.
  const path = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(path, JSON.stringify([{ ...es, use: "enc" }]));
    const run = await runAdminCli(["config", "check"], {
      ...BASE_ENV,
      ACCESS_TOKEN_ALG: "ES256",
      SIGNING_KEYS_FILE: path,
    });
    assert.equal(run.code, 1, run.stderr);
    const problems = run.stderr.split("\n").filter((line) => /^admin: (?!warning)/.test(line));
    assert.deepEqual(problems, [
      'admin: SIGNING_KEYS_FILE: key "ES256-0" has "use" "enc"; a signing key has "use": "sig" or no "use"',
    ]);
    assert.ok(!run.stderr.includes(es.d), "no d echoed");
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("signing keys: SIGNING_KEYS_FILE holds the same array; both at once is refused", async () => {
  const keys = await freshKeys("EdDSA", 2);
  const path = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(path, JSON.stringify(keys));
    const config = loadConfig({ ...BASE_ENV, ACCESS_TOKEN_ALG: "EdDSA", SIGNING_KEYS_FILE: path });
    assert.deepEqual(config.signingKeysFile?.map((key) => key.kid), ["EdDSA-0", "EdDSA-1"]);
    const error = configError({ ...signingEnv("EdDSA", keys), SIGNING_KEYS_FILE: path });
    assert.match(error.message, /both set/);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("admin: keys generate --alg prints a fresh private JWK the service accepts", async () => {
  for (const alg of ["ES256", "EdDSA"] as const) {
    const runs = [
      await runAdminCli(["keys", "generate", "--alg", alg], {}),
      await runAdminCli(["keys", "generate", `--alg=${alg}`], {}),
    ];
    const keys = runs.map((run) => {
      assert.equal(run.code, 0, run.stderr);
      return JSON.parse(run.stdout);
    });
    assert.notEqual(keys[0].kid, keys[1].kid, "a fresh kid");
    assert.notEqual(keys[0].d, keys[1].d, "a fresh key");
    const config = loadConfig({ ...BASE_ENV, ...signingEnv(alg, keys) });
    assert.equal(config.signingKeys?.length, 2);
  }
  const wrong = await runAdminCli(["keys", "generate", "--alg", "HS256"], {});
  assert.equal(wrong.code, 2);
  assert.match(wrong.stderr, /--alg must be ES256 or EdDSA/);
});
