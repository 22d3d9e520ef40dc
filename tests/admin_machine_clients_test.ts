/**
 * `admin clients add|list|delete` for machine clients, as an operator runs them beside a live
 * service (a child process on a KV file): one JSON line with the secret shown once and stored
 * nowhere in clear, the list without secrets, key files that hold a private key refused, and a
 * deleted client refused at once by the service.
 */

import assert from "node:assert/strict";
import { kvText, TEST_SECRET } from "./_helpers.ts";
import { baseUrlEnv, basic, clientKeyPair, writeAccessFile } from "./_machine_clients.ts";
import { type CommandRun, fetchJson, type Json, runAdminCli, spawnWithGitLab } from "./_service.ts";
import { openDatabase } from "../src/store/open.ts";

function jsonLines(text: string): Json[] {
  return text.trim().split("\n").filter((line) => line !== "").map((line) => JSON.parse(line));
}

function clientCredentials(serviceUrl: string, headers: Record<string, string>) {
  return fetchJson(`${serviceUrl}/token`, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials" }),
  });
}

Deno.test({
  name:
    "admin clients add/list/delete: one JSON line, the secret once and never stored, deletion refused at once",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir();
    const shared = {
      GITLAB_CLIENT_ID: "admin-test-app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: `${dir}/kv.sqlite3`,
      MACHINE_ACCESS_FILE: await writeAccessFile([
        { client_id: "ci-bot", servers: ["default"] },
        { client_id: "signer", servers: ["default"] },
      ]),
      // private_key_jwt needs BASE_URL; the CLI refuses keys without it (below).
      ...baseUrlEnv(),
    };
    const started = await spawnWithGitLab(shared.GITLAB_CLIENT_ID, shared);
    const admin = (args: string[]): Promise<CommandRun> =>
      runAdminCli(["clients", ...args], { ...shared, GITLAB_URL: started.gitlab.url.href });
    try {
      const url = started.service.url;
      const added = await admin([
        "add",
        "--name",
        "CI bot",
        "--grant",
        "client_credentials",
        "--id",
        "ci-bot",
        "--secret",
      ]);
      assert.equal(added.code, 0, added.stderr);
      const lines = added.stdout.trim().split("\n");
      assert.equal(lines.length, 1, added.stdout);
      const { client_id, client_secret } = JSON.parse(lines[0]);
      assert.equal(client_id, "ci-bot");
      assert.match(client_secret, /^[A-Za-z0-9_-]{43}$/);
      assert.match(added.stderr, /shown this once/);

      const key = await clientKeyPair("ES256", "signer-1");
      const keyFile = `${dir}/signer.jwks.json`;
      await Deno.writeTextFile(keyFile, JSON.stringify({ keys: [key.jwk] }));
      const { BASE_URL: _, ...withoutBaseUrl } = shared;
      const unserved = await runAdminCli([
        "clients",
        "add",
        "--name",
        "Signer",
        "--grant",
        "client_credentials",
        "--id",
        "signer",
        "--jwks-file",
        keyFile,
      ], { ...withoutBaseUrl, GITLAB_URL: started.gitlab.url.href });
      assert.equal(unserved.code, 2, unserved.stderr);
      assert.match(unserved.stderr, /--jwks-file needs BASE_URL.*nothing added/);
      const withKeys = await admin([
        "add",
        "--name",
        "Signer",
        "--grant",
        "client_credentials",
        "--id",
        "signer",
        "--jwks-file",
        keyFile,
      ]);
      assert.equal(withKeys.code, 0, withKeys.stderr);
      assert.deepEqual(jsonLines(withKeys.stdout), [{ client_id: "signer" }]);

      const taken = await admin([
        "add",
        "--name",
        "Again",
        "--grant",
        "client_credentials",
        "--id",
        "signer",
        "--secret",
      ]);
      assert.equal(taken.code, 1);
      assert.match(taken.stderr, /is taken/);
      const privateFile = `${dir}/private.json`;
      const { exportJWK } = await import("jose");
      await Deno.writeTextFile(privateFile, JSON.stringify(await exportJWK(key.privateKey)));
      const leaked = await admin([
        "add",
        "--name",
        "Leak",
        "--grant",
        "client_credentials",
        "--jwks-file",
        privateFile,
      ]);
      assert.equal(leaked.code, 2);
      assert.match(leaked.stderr, /private .*register the public key only/);
      const both = await admin([
        "add",
        "--name",
        "X",
        "--grant",
        "client_credentials",
        "--secret",
        "--jwks-file",
        keyFile,
      ]);
      assert.equal(both.code, 2);
      const otherGrant = await admin([
        "add",
        "--name",
        "X",
        "--grant",
        "authorization_code",
        "--secret",
      ]);
      assert.equal(otherGrant.code, 2);

      const listed = await admin(["list", "--json"]);
      assert.equal(listed.code, 0, listed.stderr);
      assert.deepEqual(
        jsonLines(listed.stdout).map(({ clientId, kind, tokenEndpointAuthMethod, keyIds }) => ({
          clientId,
          kind,
          tokenEndpointAuthMethod,
          keyIds,
        })),
        [
          {
            clientId: "ci-bot",
            kind: "machine",
            tokenEndpointAuthMethod: "client_secret_basic client_secret_post",
            keyIds: [],
          },
          {
            clientId: "signer",
            kind: "machine",
            tokenEndpointAuthMethod: "private_key_jwt",
            keyIds: ["signer-1"],
          },
        ],
      );
      assert.ok(!listed.stdout.includes(client_secret));
      const table = await admin(["list"]);
      assert.match(table.stdout, /MACHINE CLIENT/);
      assert.match(table.stdout, /2 machine client\(s\)/);
      const stats = await runAdminCli(["stats", "--json"], shared);
      assert.equal(stats.code, 0, stats.stderr);
      assert.equal(jsonLines(stats.stdout)[0].machineClients, 2, stats.stdout);
      assert.match((await runAdminCli(["stats"], shared)).stdout, /machine clients\s+2/);

      const opened = await openDatabase({ kvPath: shared.KV_PATH, databasePoolSize: 1 });
      try {
        assert.ok(
          !(await kvText(opened.database)).includes(client_secret),
          "stored only as a hash",
        );
      } finally {
        await opened.close();
      }
      const issued = await clientCredentials(url, basic(client_id, client_secret));
      assert.equal(issued.status, 200, JSON.stringify(issued.body));

      const deleted = await admin(["delete", "ci-bot"]);
      assert.equal(deleted.code, 0, deleted.stderr);
      const [action] = jsonLines(deleted.stdout);
      assert.equal(action.message, "operator action");
      assert.equal(action.kind, "machine");
      const refused = await clientCredentials(url, basic(client_id, client_secret));
      assert.equal(refused.status, 401);
      assert.equal(refused.body.error, "invalid_client");
      assert.equal((await admin(["delete", "ci-bot"])).code, 1);
    } finally {
      await started.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
