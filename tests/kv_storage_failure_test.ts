/**
 * A KV file the service can no longer write (a full disk, an I/O error, a file system gone
 * read-only): requests that write are answered 503 `temporarily_unavailable` with
 * `Retry-After`, never 500 nor a stack trace; `/readyz` says `kv: read_only` until a write goes
 * through again; what was written before stays whole.
 *
 * Without privileges the file's size limit (RLIMIT_FSIZE, `ulimit -f`, with SIGXFSZ ignored)
 * stands in for the disk: SQLite meets EFBIG, an I/O error. A full tmpfs (mount needs root)
 * is the disk itself, and shows the service recovering once space is freed. Another process
 * holding the file's write lock (`BEGIN EXCLUSIVE`, as a `sqlite3` shell or a backup tool
 * would) is the storage unavailable too.
 */

import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { TEST_SECRET } from "./_helpers.ts";
import { runAdminCli, type ServiceProcess, spawnService } from "./_service.ts";

const REDIRECT = "http://127.0.0.1:33418/callback";
/** Registrations tried before the test gives up on meeting the limit. */
const MAX_REGISTRATIONS = 400;

function serviceEnv(kvPath: string): Record<string, string> {
  return { GITLAB_CLIENT_ID: "kv-full-app", JWT_SECRET: TEST_SECRET, KV_PATH: kvPath };
}

/** POST /register of a client whose metadata fills most of a page of the KV file. */
function register(service: ServiceProcess, index: number): Promise<Response> {
  return fetch(`${service.url}/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: `storage client ${index} ${"x".repeat(400)}`,
      redirect_uris: [1, 2, 3, 4, 5].map((n) => `${REDIRECT}/${n}/${"x".repeat(500)}`),
      token_endpoint_auth_method: "none",
    }),
  });
}

/** Registers clients until one is refused; their ids, and the refusal. */
async function registerUntilRefused(
  service: ServiceProcess,
): Promise<{ registered: string[]; refused: Response }> {
  const registered: string[] = [];
  for (let index = 0; index < MAX_REGISTRATIONS; index++) {
    const response = await register(service, index);
    if (response.status !== 201) return { registered, refused: response };
    registered.push((await response.json()).client_id);
  }
  throw new Error(`${MAX_REGISTRATIONS} registrations and the store still takes writes`);
}

/** The 503 a request gets while the store cannot write, as the PostgreSQL backend answers. */
async function assertStoreUnavailable(response: Response): Promise<void> {
  const text = await response.text();
  assert.equal(response.status, 503, text);
  assert.equal(response.headers.get("retry-after"), "5");
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  assert.deepEqual(JSON.parse(text), {
    error: "temporarily_unavailable",
    error_description: "The service's database is unavailable",
  });
}

async function readiness(service: ServiceProcess): Promise<[number, unknown]> {
  const response = await fetch(`${service.url}/readyz`);
  return [response.status, await response.json()];
}

/** The client ids the operator's CLI finds in the KV file. */
async function storedClientIds(kvPath: string): Promise<string[]> {
  const listed = await runAdminCli(["clients", "list", "--json"], serviceEnv(kvPath));
  assert.equal(listed.code, 0, listed.stderr);
  return listed.stdout.trim().split("\n").filter((line) => line !== "")
    .map((line) => JSON.parse(line).clientId).sort();
}

Deno.test("KV storage: a KV file that cannot grow (I/O error) answers 503 temporarily_unavailable with Retry-After, /readyz says read_only, and what was written stays whole", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kv-storage-" });
  const kvPath = `${dir}/kv.sqlite`;
  // 256 KiB (dash counts 512-byte blocks; bash 1 KiB ones: 512 KiB).
  const service = await spawnService(serviceEnv(kvPath), undefined, {
    shellSetup: "trap '' XFSZ\nulimit -f 512",
  });
  let stopped = false;
  try {
    assert.deepEqual(await readiness(service), [200, {
      status: "ok",
      checks: { kv: "ok", configuration: "ok" },
    }]);
    const { registered, refused } = await registerUntilRefused(service);
    assert.ok(
      registered.length > 0,
      `the store took writes first: ${await refused.clone().text()}`,
    );
    await assertStoreUnavailable(refused);
    // Every write keeps failing the same way, and the service keeps answering.
    await assertStoreUnavailable(await register(service, -1));
    assert.deepEqual(await readiness(service), [503, {
      status: "unavailable",
      checks: { kv: "read_only", configuration: "ok" },
    }]);
    const logs = service.logs.join("\n");
    assert.match(logs, /store unavailable.*KV storage unavailable: disk I\/O error/);
    assert.doesNotMatch(logs, /unhandled error|\n\s+at /);
    assert.equal(await service.stop(), 0);
    stopped = true;
    // Every client answered 201 is stored, and no other.
    assert.deepEqual(await storedClientIds(kvPath), registered.sort());
  } finally {
    if (!stopped) await service.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

/** Runs `mount` (or `umount`) with `args`; whether it succeeded. */
async function mountCommand(program: "mount" | "umount", args: string[]): Promise<boolean> {
  try {
    const { success } = await new Deno.Command(program, { args, stdout: "null", stderr: "null" })
      .output();
    return success;
  } catch {
    return false;
  }
}

/** Whether this user may mount a tmpfs (root, outside a container that forbids it). */
async function tmpfsMountable(): Promise<boolean> {
  const dir = await Deno.makeTempDir({ prefix: "kv-mount-probe-" });
  try {
    if (!await mountCommand("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", dir])) return false;
    return await mountCommand("umount", [dir]);
  } finally {
    await Deno.remove(dir);
  }
}

const canMount = await tmpfsMountable();

Deno.test({
  name:
    "KV storage: a full disk (a small tmpfs filled up) answers 503 with Retry-After and /readyz read_only; once space is freed both recover without a restart",
  ignore: !canMount,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kv-full-" });
    assert.ok(await mountCommand("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir]));
    const kvPath = `${dir}/kv.sqlite`;
    const service = await spawnService(serviceEnv(kvPath));
    let stopped = false;
    try {
      const filler = `${dir}/filler`;
      // Written until the disk is full; what fitted stays.
      await Deno.writeFile(filler, new Uint8Array(2 * 1024 * 1024)).then(
        () => assert.fail("a 1 MiB tmpfs took 2 MiB"),
        (error) => assert.match(String(error), /No space left on device/),
      );
      const { registered, refused } = await registerUntilRefused(service);
      await assertStoreUnavailable(refused);
      assert.deepEqual(await readiness(service), [503, {
        status: "unavailable",
        checks: { kv: "read_only", configuration: "ok" },
      }]);
      assert.match(
        service.logs.join("\n"),
        /store unavailable.*KV storage unavailable: database or disk is full/,
      );

      await Deno.remove(filler);
      assert.deepEqual(await readiness(service), [200, {
        status: "ok",
        checks: { kv: "ok", configuration: "ok" },
      }]);
      const again = await register(service, -1);
      assert.equal(again.status, 201);
      registered.push((await again.json()).client_id);
      assert.doesNotMatch(service.logs.join("\n"), /unhandled error|\n\s+at /);
      assert.equal(await service.stop(), 0);
      stopped = true;
      assert.deepEqual(await storedClientIds(kvPath), registered.sort());
    } finally {
      if (!stopped) await service.stop();
      await mountCommand("umount", [dir]);
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("KV storage: a KV file moved away or replaced under the running service: /readyz answers 503 kv replaced until the file is back", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kv-replaced-" });
  const kvPath = `${dir}/kv.sqlite`;
  const service = await spawnService(serviceEnv(kvPath));
  const replaced = [503, {
    status: "unavailable",
    checks: { kv: "replaced", configuration: "ok" },
  }];
  try {
    assert.equal((await register(service, 0)).status, 201);
    assert.equal((await readiness(service))[0], 200);
    await Deno.rename(kvPath, `${kvPath}.moved`);
    assert.deepEqual(await readiness(service), replaced);
    assert.match(service.logs.join("\n"), /readiness check: KV file replaced/);
    // Another file at the path (a restore moved into place) is not the one the process writes.
    await Deno.copyFile(`${kvPath}.moved`, `${dir}/restored`);
    await Deno.rename(`${dir}/restored`, kvPath);
    assert.deepEqual(await readiness(service), replaced);
    await Deno.rename(`${kvPath}.moved`, kvPath);
    assert.equal((await readiness(service))[0], 200);
  } finally {
    await service.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("KV storage: a KV file whose write lock another process holds past the retry budget answers 503 temporarily_unavailable with Retry-After; /readyz stays 200 (reads go on); writes go through once it is released", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kv-locked-" });
  const kvPath = `${dir}/kv.sqlite`;
  // The deadline far off: the 503 is the lock's, not a request out of time.
  const service = await spawnService({ ...serviceEnv(kvPath), DATABASE_TIMEOUT_MS: "30000" });
  try {
    assert.equal((await register(service, 0)).status, 201);
    // This process holds it, as a `sqlite3` shell would: readers still read (WAL).
    const holder = new DatabaseSync(kvPath);
    holder.exec("BEGIN EXCLUSIVE");
    try {
      await assertStoreUnavailable(await register(service, 1));
      assert.deepEqual(await readiness(service), [200, {
        status: "ok",
        checks: { kv: "ok", configuration: "ok" },
      }]);
      const logs = service.logs.join("\n");
      assert.match(
        logs,
        /store unavailable.*KV file locked by another process for over 2000 ms: database is locked/,
      );
      assert.doesNotMatch(logs, /unhandled error|registration failed|\n\s+at /);
    } finally {
      holder.exec("ROLLBACK");
      holder.close();
    }
    assert.equal((await register(service, 2)).status, 201);
  } finally {
    await service.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
