/**
 * Secrets from files (issue 38 §2), the secrets secret_files_test.ts does not run end to end:
 * JWT_SECRET_PREVIOUS_FILE (a token signed before a rotation still introspects active),
 * INTROSPECTION_TOKENS_FILE (its comma list, each token a caller) and ENCRYPTION_KEY_FILE (the
 * service seals GitLab tokens with the file's key; the admin CLI opens them through the same
 * file, and not through JWT_SECRET alone). Real processes sharing one KV file. And every variable
 * the table marks secret, in process: its file read (a blank variable beside it is unset), and
 * each of the three refusals naming its `_FILE`, never the secret.
 */

import assert from "node:assert/strict";
import { listConfigVariables, loadConfig } from "../src/app/config.ts";
import { withSecretFiles } from "../src/config/secret_files.ts";
import { ConfigError } from "../src/config/variable.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { fetchJson, runAdminCli, signInOverHttp, spawnWithGitLab } from "./_service.ts";

const OLD_SECRET = "the-secret-before-the-rotation-32-bytes-or-more";
const CALLERS = [
  "resource-server-one-token-32-bytes-or-more",
  "resource-server-two-token-32-bytes+",
];
const ENCRYPTION = "an-encryption-key-from-a-mounted-file-32-bytes";

/** A value each secret variable accepts (for DATABASE_URL, a URL with a password in it). */
function validValue(name: string): string {
  if (name === "DATABASE_URL") return `postgres://app:${OLD_SECRET}@db.internal:5432/auth`;
  return `${name.toLowerCase()}-value-from-a-file-32-bytes-or-more`;
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "secret-files-each-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** `token` introspected by `caller` at `serviceUrl`: its `active`. */
async function introspectActive(serviceUrl: string, caller: string, token: string) {
  const { status, body } = await fetchJson(`${serviceUrl}/introspect`, {
    method: "POST",
    headers: {
      "Content-Type": "application/x-www-form-urlencoded",
      Authorization: `Bearer ${caller}`,
    },
    body: new URLSearchParams({ token }),
  });
  assert.equal(status, 200, JSON.stringify(body));
  return body.active;
}

Deno.test("JWT_SECRET_PREVIOUS_FILE and INTROSPECTION_TOKENS_FILE: a token from before a rotation introspects active for each caller of the file", () =>
  withDir(async (dir) => {
    const kv = { KV_PATH: `${dir}/kv.sqlite3`, ENCRYPTION_KEY: ENCRYPTION };
    const before = await spawnWithGitLab("app", { ...kv, JWT_SECRET: OLD_SECRET });
    let accessToken: string;
    try {
      accessToken = (await signInOverHttp(before.service.url, before.gitlab)).access_token;
    } finally {
      await before.close();
    }
    await Deno.writeTextFile(`${dir}/previous`, `${OLD_SECRET}\n`);
    await Deno.writeTextFile(`${dir}/callers`, `${CALLERS.join(",")}\n`);
    const after = await spawnWithGitLab("app", {
      ...kv,
      JWT_SECRET: TEST_SECRET,
      JWT_SECRET_PREVIOUS: "",
      JWT_SECRET_PREVIOUS_FILE: `${dir}/previous`,
      INTROSPECTION_TOKENS_FILE: `${dir}/callers`,
    });
    try {
      for (const caller of CALLERS) {
        assert.equal(await introspectActive(after.service.url, caller, accessToken), true);
      }
      const logs = after.service.logs.join("\n");
      for (const secret of [OLD_SECRET, ...CALLERS]) assert.ok(!logs.includes(secret));
    } finally {
      await after.close();
    }
  }));

Deno.test("ENCRYPTION_KEY_FILE: the service seals GitLab tokens with the file's key and the admin CLI opens them through the same file", () =>
  withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/encryption`, `${ENCRYPTION}\n`);
    const kv = { KV_PATH: `${dir}/kv.sqlite3`, JWT_SECRET: TEST_SECRET };
    const { gitlab, service, close } = await spawnWithGitLab("app", {
      ...kv,
      ENCRYPTION_KEY_FILE: `${dir}/encryption`,
    });
    try {
      await signInOverHttp(service.url, gitlab);
      const env = { ...kv, GITLAB_URL: gitlab.url.href, GITLAB_CLIENT_ID: "app" };
      // Not sealed under the key JWT_SECRET derives: the service used the file's.
      const derived = await runAdminCli(["sessions", "revoke", "--user", "ada"], env);
      assert.notEqual(derived.code, 0, derived.stdout);
      assert.match(derived.stderr, /sealed under a key this environment does not have/);
      const revoked = await runAdminCli(["sessions", "revoke", "--user", "ada"], {
        ...env,
        ENCRYPTION_KEY_FILE: `${dir}/encryption`,
      });
      assert.equal(revoked.code, 0, revoked.stderr);
      assert.equal(gitlab.revokedTokens.size > 0, true, "the GitLab token was opened and revoked");
      assert.ok(!(revoked.stdout + revoked.stderr).includes(ENCRYPTION));
    } finally {
      await close();
    }
  }));

Deno.test("every secret of the table: its _FILE is read, and both set, unreadable or empty is one error naming it, never the secret", () =>
  withDir(async (dir) => {
    const secrets = listConfigVariables().filter((variable) => variable.secret);
    assert.ok(secrets.length >= 7, secrets.map(({ name }) => name).join());
    await Deno.writeTextFile(`${dir}/empty`, "\n");
    for (const { name } of secrets) {
      const value = validValue(name);
      const file = `${dir}/${name}`;
      await Deno.writeTextFile(file, `${value}\n`);
      const base = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET, [name]: "" };
      // A blank variable (compose's `${NAME:-}`) is unset: the file is read, not "both set".
      const config = loadConfig({ ...base, [`${name}_FILE`]: file });
      assert.ok(
        JSON.stringify(config).includes(JSON.stringify(value)),
        `${name}: the file's value in force`,
      );
      const refusals: [Record<string, string>, RegExp][] = [
        [{ [name]: value, [`${name}_FILE`]: file }, /is set and so is/],
        [{ [`${name}_FILE`]: `${dir}/missing` }, /cannot read/],
        [{ [`${name}_FILE`]: `${dir}/empty` }, /is empty/],
      ];
      for (const [env, problem] of refusals) {
        const error = (() => {
          try {
            loadConfig({ ...base, ...env });
          } catch (error) {
            return error;
          }
        })();
        assert.ok(error instanceof ConfigError, `${name}: ${error}`);
        assert.equal(error.variable, `${name}_FILE`);
        assert.match(error.message, problem);
        assert.ok(!error.message.includes(value) && !error.message.includes(OLD_SECRET), name);
      }
    }
  }));

Deno.test("a secret's file: exactly one trailing newline is removed, the rest is the value as written", () => {
  const secrets = listConfigVariables().filter((variable) => variable.secret);
  const files: Record<string, string> = {
    "/lf": "value\n",
    "/crlf": "value\r\n",
    "/two": "value\n\n",
    "/none": " value ",
  };
  const read = (path: string) => files[path];
  const resolved = (path: string) => withSecretFiles({ JWT_SECRET_FILE: path }, secrets, read);
  assert.equal(resolved("/lf").JWT_SECRET, "value");
  assert.equal(resolved("/crlf").JWT_SECRET, "value");
  assert.equal(resolved("/two").JWT_SECRET, "value\n");
  assert.equal(resolved("/none").JWT_SECRET, " value ");
});
