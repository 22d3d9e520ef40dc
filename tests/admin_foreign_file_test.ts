/**
 * The operator's CLI opens only the service's store: a KV_PATH naming a file that holds no Deno
 * KV store (an empty file, another program's SQLite database) is refused in one line and left
 * untouched, as a PostgreSQL database without the service's tables is. Opening it as KV would
 * write KV's tables into it and report "0 sessions".
 */

import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { TEST_SECRET } from "./_helpers.ts";
import { runAdminCli } from "./_service.ts";

function tablesOf(path: string): string[] {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    const rows = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all();
    return rows.map((row) => String(row.name)).sort();
  } finally {
    db.close();
  }
}

Deno.test("admin: a KV_PATH naming an empty file or another program's SQLite database is refused and left untouched", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const other = `${dir}/grafana.db`;
    const db = new DatabaseSync(other);
    db.exec("CREATE TABLE dashboard (id INTEGER PRIMARY KEY, title TEXT)");
    db.close();
    const empty = `${dir}/empty.sqlite3`;
    await Deno.writeTextFile(empty, "");

    for (const path of [other, empty]) {
      for (const args of [["stats"], ["config", "check", "--connect"]]) {
        const run = await runAdminCli(args, {
          GITLAB_CLIENT_ID: "admin-test-app",
          JWT_SECRET: TEST_SECRET,
          KV_PATH: path,
        });
        assert.equal(run.code, 1, `${args.join(" ")} on ${path}: ${run.stdout}${run.stderr}`);
        if (args[0] === "stats") assert.equal(run.stdout, "");
        const refusal = run.stderr.trim().split("\n").filter((line) => !/warning/.test(line));
        assert.equal(refusal.length, 1, run.stderr);
        assert.match(refusal[0], /^admin: cannot open KV .*: it holds no Deno KV store/);
      }
    }
    assert.deepEqual(tablesOf(other), ["dashboard"], "nothing written into it");
    assert.equal((await Deno.stat(empty)).size, 0, "nothing written into it");

    // The service's own KV file still opens.
    const kvPath = `${dir}/kv.sqlite3`;
    const kv = await Deno.openKv(kvPath);
    kv.close();
    const stats = await runAdminCli(["stats", "--json"], {
      GITLAB_CLIENT_ID: "admin-test-app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: kvPath,
    });
    assert.equal(stats.code, 0, stats.stderr);
    assert.equal(JSON.parse(stats.stdout).sessions, 0);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
