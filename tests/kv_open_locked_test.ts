/**
 * Workers of `deno serve --parallel` opening one KV file at once: SQLite answers "database is
 * locked" to all but one while it sets a new file up. Opening tries again a few times instead
 * of stopping the worker (seen as a flaky start-up under load); any other failure, or a lock
 * that never clears, is still one line naming KV_PATH.
 */

import assert from "node:assert/strict";
import { openKv } from "../src/store/kv_open.ts";
import { ConfigError } from "../src/config/variable.ts";

const locked = () => Promise.reject(new Error("database is locked"));
/** No real waiting: the waits asked for are recorded. */
const waits: number[] = [];
const noWait = (ms: number) => (waits.push(ms), Promise.resolve());

Deno.test("KV open: a file locked while another opener sets it up is opened once it is free", async () => {
  let calls = 0;
  const kv = await openKv(":memory:", (path) => ++calls < 3 ? locked() : Deno.openKv(path), noWait);
  try {
    assert.equal(calls, 3);
  } finally {
    kv.close();
  }
});

Deno.test("KV open: a lock that never clears, or another failure, is one line naming KV_PATH", async () => {
  waits.length = 0;
  await assert.rejects(openKv("/x/kv.sqlite", locked, noWait), (error: Error) => {
    assert.ok(error instanceof ConfigError);
    assert.match(error.message, /^KV_PATH: cannot open \/x\/kv\.sqlite/);
    return true;
  });
  assert.equal(waits.length, 9, "tried ten times, waiting longer each time");
  let calls = 0;
  await assert.rejects(
    openKv("/x/kv.sqlite", () => (calls++, Promise.reject(new Error("disk I/O error"))), noWait),
    ConfigError,
  );
  assert.equal(calls, 1, "only a lock is tried again");
});
