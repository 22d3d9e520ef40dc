/**
 * Secrets from files (issue 38 §2) for the secrets a sign-in alone does not prove, over real
 * processes: after a rotation to a JWT_SECRET_FILE, a token of JWT_SECRET_PREVIOUS_FILE's secret
 * still introspects active for a caller of INTROSPECTION_TOKENS_FILE, and the admin CLI opens
 * the stored GitLab tokens with ENCRYPTION_KEY_FILE's key to revoke them.
 */

import assert from "node:assert/strict";
import { TEST_SECRET } from "./_helpers.ts";
import { runAdminCli, signInOverHttp, spawnService, withGitLab } from "./_service.ts";

const NEW_SECRET = "the-rotated-jwt-secret-from-a-file-32-bytes-plus";
const ENCRYPTION_KEY = "encryption-key-for-gitlab-tokens-32-bytes-plus!";
const CALLER = "resource-server-introspection-caller-32-bytes+";

Deno.test("JWT_SECRET_PREVIOUS_FILE, INTROSPECTION_TOKENS_FILE and ENCRYPTION_KEY_FILE are used", () =>
  withGitLab(async (gitlab) => {
    const dir = await Deno.makeTempDir({ prefix: "secret-files-rotation-" });
    try {
      const base = {
        GITLAB_URL: gitlab.url.href,
        GITLAB_CLIENT_ID: "app",
        KV_PATH: `${dir}/kv.sqlite3`,
      };
      const before = await spawnService({
        ...base,
        JWT_SECRET: TEST_SECRET,
        ENCRYPTION_KEY,
      });
      let tokens;
      try {
        tokens = await signInOverHttp(before.url, gitlab);
      } finally {
        await before.stop();
      }
      await Deno.writeTextFile(`${dir}/jwt`, `${NEW_SECRET}\n`);
      await Deno.writeTextFile(`${dir}/previous`, `${TEST_SECRET}\n`);
      await Deno.writeTextFile(`${dir}/introspection`, `${CALLER}\n`);
      await Deno.writeTextFile(`${dir}/encryption`, `${ENCRYPTION_KEY}\n`);
      const files = {
        ...base,
        JWT_SECRET_FILE: `${dir}/jwt`,
        JWT_SECRET_PREVIOUS_FILE: `${dir}/previous`,
        INTROSPECTION_TOKENS_FILE: `${dir}/introspection`,
        ENCRYPTION_KEY_FILE: `${dir}/encryption`,
      };
      const after = await spawnService(files);
      try {
        const response = await fetch(`${after.url}/introspect`, {
          method: "POST",
          headers: {
            "Content-Type": "application/x-www-form-urlencoded",
            Authorization: `Bearer ${CALLER}`,
          },
          body: new URLSearchParams({ token: tokens.access_token }),
        });
        assert.equal(response.status, 200);
        assert.equal((await response.json()).active, true, "the previous secret's token");
        const logs = after.logs.join("\n");
        for (const secret of [NEW_SECRET, TEST_SECRET, CALLER, ENCRYPTION_KEY]) {
          assert.ok(!logs.includes(secret), "no secret logged");
        }
      } finally {
        await after.stop();
      }
      const revokedBefore = gitlab.revokedTokens.size;
      const revoked = await runAdminCli(["sessions", "revoke", "--user", "ada"], files);
      assert.equal(revoked.code, 0, revoked.stderr);
      assert.ok(gitlab.revokedTokens.size > revokedBefore, "GitLab tokens opened and revoked");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }));
