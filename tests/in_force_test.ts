/**
 * Know what is running (issue 38 §5): the one `listening` line names the store (never a
 * password), the signing algorithm and key (an HS256 secret by fingerprint only), the served
 * MCP servers, the policy files and the allow-lists' sizes. With secrets from files (§2): a
 * sign-in end to end on PostgreSQL whose DATABASE_URL and JWT_SECRET come from `_FILE`s, and
 * `admin stats` there reporting the database's records, not a KV file.
 */

import assert from "node:assert/strict";
import { jwtVerify } from "jose";
import { secretFingerprint } from "../src/app/in_force.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";
import { runAdminCli, signInOverHttp, spawnWithGitLab } from "./_service.ts";

const FILE_SECRET = "a-jwt-secret-read-from-a-mounted-file-32-bytes-plus";

Deno.test("the listening line says what is in force on KV, and never the secret", async () => {
  const dir = await Deno.makeTempDir({ prefix: "in-force-" });
  try {
    await Deno.writeTextFile(
      `${dir}/machines.yaml`,
      "clients:\n  - client_id: bot\n    servers: [default]\n",
    );
    const { service, close } = await spawnWithGitLab("app", {
      KV_PATH: `${dir}/kv.sqlite3`,
      ALLOWED_GITLAB_GROUPS: "acme/platform,acme/ops:developer",
      ALLOWED_GITLAB_USERS: "id:7",
      MACHINE_ACCESS_FILE: `${dir}/machines.yaml`,
    });
    try {
      const line = service.listening as Record<string, unknown>;
      assert.equal(line.store, `kv:${dir}/kv.sqlite3`);
      assert.equal(line.signingAlg, "HS256");
      assert.equal(line.signingKeyId, await secretFingerprint(TEST_SECRET));
      assert.match(String(line.signingKeyId), /^sha256:[0-9a-f]{8}$/);
      assert.equal(line.allowedGroups, 2);
      assert.equal(line.allowedUsers, 1);
      assert.equal(line.allowedRedirectUris, 0);
      assert.equal(line.machineAccessFile, `${dir}/machines.yaml`);
      assert.equal(line.signIn, "device");
      const listening = service.logs.filter((entry) => entry.includes('"listening"'));
      assert.equal(listening.length, 1, "one start-up line");
      assert.ok(!service.logs.join("\n").includes(TEST_SECRET), "the secret is never logged");
    } finally {
      await close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "PostgreSQL from DATABASE_URL_FILE, JWT_SECRET_FILE: sign-in works, no password logged",
  ignore: ignorePostgresTests,
  async fn() {
    const url = await (await sharedPostgres()).createDatabase();
    const dir = await Deno.makeTempDir({ prefix: "in-force-pg-" });
    try {
      await Deno.writeTextFile(`${dir}/database`, `${url}\n`);
      await Deno.writeTextFile(`${dir}/jwt`, `${FILE_SECRET}\n`);
      const files = { DATABASE_URL_FILE: `${dir}/database`, JWT_SECRET_FILE: `${dir}/jwt` };
      const migrated = await runAdminCli(["migrate"], { ...files, JWT_SECRET: "" });
      assert.equal(migrated.code, 0, migrated.stderr);
      const { gitlab, service, close } = await spawnWithGitLab("app", {
        ...files,
        JWT_SECRET: "",
        KV_PATH: "",
      });
      try {
        const tokens = await signInOverHttp(service.url, gitlab);
        const key = new TextEncoder().encode(FILE_SECRET);
        await jwtVerify(tokens.access_token, key, { algorithms: ["HS256"] });
        const parsed = new URL(url);
        const line = service.listening as Record<string, unknown>;
        assert.equal(line.store, `postgres:${parsed.host}${parsed.pathname}`);
        assert.equal(line.signingKeyId, await secretFingerprint(FILE_SECRET));
        const logs = service.logs.join("\n");
        assert.ok(!logs.includes(FILE_SECRET), "the secret is never logged");
        if (parsed.password) assert.ok(!logs.includes(parsed.password), "nor the password");

        // admin stats reports the database and its records, not a KV file.
        const stats = await runAdminCli(["stats", "--json"], { ...files, JWT_SECRET: "" });
        assert.equal(stats.code, 0, stats.stderr);
        const counts = JSON.parse(stats.stdout.trim());
        assert.equal(counts.store, line.store);
        assert.equal(counts.sessions, 1);
        assert.equal(typeof counts.clients, "number");
        assert.ok(!("kvFileBytes" in counts), stats.stdout);
        const table = await runAdminCli(["stats"], { ...files, JWT_SECRET: "" });
        assert.match(table.stdout, /^store +postgres:/m);
        assert.doesNotMatch(table.stdout, /KV file/);
      } finally {
        await close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
