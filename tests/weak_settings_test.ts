/**
 * Weak settings start, with one warning each (issue 33 §1.9): a JWT_SECRET of fewer than 8
 * distinct characters, a METRICS_TOKEN or INTROSPECTION_TOKENS token equal to a key, the redirect sign-in over a plain http: BASE_URL that is not loopback,
 * a DATABASE_URL on another host without sslmode, a RATE_LIMIT_EXEMPT or TRUST_PROXY range wider
 * than any one network's, and MACHINE_ACCESS_FILE clients without BASE_URL (private_key_jwt
 * refused).
 */

import assert from "node:assert/strict";
import { loadConfig } from "../src/app/config.ts";
import { weakSettings } from "../src/app/weak_settings.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { writeAccessFile } from "./_machine_clients.ts";
import { runAdminCli, spawnService } from "./_service.ts";

const BASE = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET };

function warnings(env: Record<string, string>): string[] {
  return weakSettings(loadConfig({ ...BASE, ...env }));
}

Deno.test("weak settings: a RATE_LIMIT_EXEMPT range wider than an IPv4 /8 or an IPv6 /16 warns", () => {
  for (const exempt of ["0.0.0.0/0", "::/0", "128.0.0.0/1", "2000::/3", "10.0.0.0/8,1.0.0.0/7"]) {
    const found = warnings({ RATE_LIMIT_EXEMPT: exempt });
    assert.equal(found.length, 1, exempt);
    assert.match(found[0], /^RATE_LIMIT_EXEMPT exempts .*: the per-address limits count almost no/);
  }
  assert.match(
    warnings({ RATE_LIMIT_EXEMPT: "10.0.0.0/8,0.0.0.0/0" })[0],
    /exempts 0\.0\.0\.0\/0:/,
  );
  for (const exempt of ["10.0.0.0/8", "203.0.113.7", "fd00::/16", "2001:db8::/32"]) {
    assert.deepEqual(warnings({ RATE_LIMIT_EXEMPT: exempt }), [], exempt);
  }
});

Deno.test("weak settings: a TRUST_PROXY range wider than an IPv4 /8 or an IPv6 /16 warns (a client there names itself 127.0.0.1)", () => {
  const base = { BASE_URL: "https://auth.example" };
  for (
    const trusted of ["0.0.0.0/0", "::/0", "0.0.0.0/0,::/0", "10.0.0.0/8,1.0.0.0/7", "2000::/3"]
  ) {
    const found = warnings({ ...base, TRUST_PROXY: trusted });
    assert.equal(found.length, 1, trusted);
    assert.match(found[0], /^TRUST_PROXY trusts .*: a client there names its own address/);
  }
  // Private ranges as wide: no Internet client is in them.
  for (const trusted of ["true", "10.0.0.0/8,fd00::/8", "fc00::/7", "fe80::/10", "203.0.113.7"]) {
    assert.deepEqual(warnings({ ...base, TRUST_PROXY: trusted }), [], trusted);
  }
});

Deno.test("weak settings: each warns once, and only when weak", () => {
  assert.deepEqual(warnings({}), []);
  const repeated = warnings({ JWT_SECRET: "a".repeat(40) });
  assert.equal(repeated.length, 1);
  assert.match(repeated[0], /^JWT_SECRET has fewer than 8 distinct characters/);
  assert.deepEqual(warnings({ JWT_SECRET: "abcdefgh".repeat(5) }), [], "8 distinct is enough");

  const redirect = { GITLAB_SIGN_IN: "redirect", GITLAB_CLIENT_SECRET: "s" };
  assert.match(
    warnings({ ...redirect, BASE_URL: "http://auth.example" }).join(),
    /GITLAB_SIGN_IN=redirect with a plain http: BASE_URL \(auth\.example\)/,
  );
  assert.deepEqual(warnings({ ...redirect, BASE_URL: "https://auth.example" }), []);
  assert.deepEqual(warnings({ ...redirect, BASE_URL: "http://127.0.0.1:8000" }), []);
  assert.deepEqual(warnings({ ...redirect, BASE_URL: "http://localhost:8000" }), []);
  assert.deepEqual(warnings({ BASE_URL: "http://auth.example" }), [], "device mode sends no code");

  assert.match(
    warnings({ DATABASE_URL: "postgres://u:p@db.example:5432/auth" }).join(),
    /DATABASE_URL names another host \(db\.example\) without sslmode/,
  );
  for (
    const url of [
      "postgres://u:p@db.example:5432/auth?sslmode=require",
      "postgres://u:p@127.0.0.1:5432/auth",
      "postgres://u:p@localhost/auth",
      "postgres://u:p@%2Fvar%2Frun%2Fpostgresql/auth",
    ]
  ) {
    assert.deepEqual(warnings({ DATABASE_URL: url }), [], url);
  }
});

Deno.test("weak settings: MACHINE_ACCESS_FILE clients without BASE_URL warn that private_key_jwt is refused", async () => {
  const path = await writeAccessFile([{ client_id: "robot", servers: ["default"] }]);
  const found = warnings({ MACHINE_ACCESS_FILE: path });
  assert.equal(found.length, 1, found.join("\n"));
  assert.match(
    found[0],
    /^MACHINE_ACCESS_FILE names clients but BASE_URL is unset: private_key_jwt/,
  );
  assert.deepEqual(warnings({ MACHINE_ACCESS_FILE: path, BASE_URL: "https://auth.example" }), []);
  assert.deepEqual(warnings({ MACHINE_ACCESS_FILE: await writeAccessFile([]) }), []);
});

Deno.test("weak settings: the service starts and says so in one warning line", async () => {
  const service = await spawnService({ ...BASE, JWT_SECRET: "x".repeat(40), KV_PATH: ":memory:" });
  try {
    const lines = service.logs.filter((line) => line.includes("distinct characters"));
    assert.equal(lines.length, 1, service.logs.join("\n"));
    assert.equal(JSON.parse(lines[0]).level, "warn");
    assert.ok(!lines[0].includes("x".repeat(40)), "the secret is never echoed");
  } finally {
    await service.stop();
  }
});

Deno.test("weak settings: METRICS_TOKEN or an INTROSPECTION_TOKENS token equal to a key warns at start-up and in config check, never the value", async () => {
  const key = "an-encryption-key-of-32-bytes-or-more!";
  const caller = "a-resource-server-token-of-its-own-0123";
  const env = {
    ...BASE,
    KV_PATH: ":memory:",
    ENCRYPTION_KEY: key,
    METRICS_TOKEN: TEST_SECRET,
    INTROSPECTION_TOKENS: `${caller},${key}`,
  };
  const expected = [
    /^METRICS_TOKEN holds the value of JWT_SECRET: every caller sending it as a bearer token/,
    /^INTROSPECTION_TOKENS holds the value of ENCRYPTION_KEY: /,
  ];
  const service = await spawnService(env);
  let logs: string[];
  try {
    logs = service.logs;
  } finally {
    await service.stop();
  }
  const logged = logs.filter((line) => line.includes("holds the value of"));
  assert.deepEqual(logged.map((line) => JSON.parse(line).level), ["warn", "warn"]);
  logged.forEach((line, index) => assert.match(JSON.parse(line).message, expected[index]));
  const check = await runAdminCli(["config", "check"], env);
  assert.equal(check.code, 0, check.stderr);
  const said = check.stderr.split("\n").filter((line) => line.includes("holds the value of"));
  said.forEach((line, index) =>
    assert.match(line.replace("admin: warning: ", ""), expected[index])
  );
  assert.equal(said.length, 2, check.stderr);
  for (const value of [key, TEST_SECRET, caller]) {
    assert.ok(!logs.join("\n").includes(value) && !check.stderr.includes(value), "never a value");
  }
  assert.deepEqual(
    warnings({ METRICS_TOKEN: `${TEST_SECRET}-other`, JWT_SECRET_PREVIOUS: `${TEST_SECRET}-old` }),
    [],
  );
  assert.match(
    warnings({
      JWT_SECRET_PREVIOUS: `${TEST_SECRET}-old`,
      INTROSPECTION_TOKENS: `${TEST_SECRET}-old`,
    })
      .join(),
    /^INTROSPECTION_TOKENS holds the value of JWT_SECRET_PREVIOUS: /,
  );
  assert.match(
    warnings({ ENCRYPTION_KEY_PREVIOUS: `${TEST_SECRET}-old`, METRICS_TOKEN: `${TEST_SECRET}-old` })
      .join(),
    /^METRICS_TOKEN holds the value of ENCRYPTION_KEY_PREVIOUS: /,
  );
});
