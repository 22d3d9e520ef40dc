/**
 * The operator's CLI on a store that does not answer in time: the KV file's write lock held by
 * another process (a long write, a backup tool, a stuck writer) stands for a database that is
 * up but busy. The command says so in one line and exits 1, never with a stack trace.
 */

import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { TEST_SECRET } from "./_helpers.ts";
import { runAdminCli } from "./_service.ts";

Deno.test("admin: a store that does not answer within DATABASE_TIMEOUT_MS is one line and exit 1", async () => {
  const dir = await Deno.makeTempDir();
  const env = {
    GITLAB_CLIENT_ID: "admin-test-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/kv.sqlite3`,
    DATABASE_TIMEOUT_MS: "300",
  };
  const kv = await Deno.openKv(env.KV_PATH);
  await kv.set(["made"], true);
  kv.close();
  // Readers still read (WAL); a writer waits for the lock.
  const holder = new DatabaseSync(env.KV_PATH);
  holder.exec("BEGIN IMMEDIATE");
  let held = true;
  const release = () => {
    if (held) holder.exec("ROLLBACK");
    held = false;
  };
  // Let go in the end, so that a CLI that waits for the lock finishes (and the test fails).
  const timer = setTimeout(release, 5_000);
  try {
    const run = await runAdminCli(
      ["clients", "add", "--name", "CI bot", "--grant", "client_credentials", "--secret"],
      env,
    );
    assert.ok(held, "the CLI answered only once the lock was released");
    assert.equal(run.code, 1, run.stderr);
    assert.equal(run.stdout, "", "no client_id printed: nothing was added");
    const lines = run.stderr.trim().split("\n");
    assert.equal(lines.length, 1, run.stderr);
    assert.match(lines[0], /^admin: the store did not answer: .*DATABASE_TIMEOUT_MS \(300 ms\)/);
    release();
    const listed = await runAdminCli(["clients", "list", "--json"], env);
    assert.equal(listed.code, 0, listed.stderr);
    assert.equal(listed.stdout, "", "the write it gave up on never landed");
  } finally {
    clearTimeout(timer);
    release();
    holder.close();
    await Deno.remove(dir, { recursive: true });
  }
});
