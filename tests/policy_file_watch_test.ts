/**
 * MCP_POLICY_FILE follows the file on disk (issue 33 §2.3): a changed content is reloaded
 * without a signal, through a Kubernetes-style symlink swap too; a broken file is reported once
 * and the policy in force stays; the start-up line names the pid that takes SIGHUP.
 */

import assert from "node:assert/strict";
import {
  createCallPolicyHolder,
  readPolicyFile,
  type Reload,
} from "../src/access/call_policy_file.ts";
import { watchFile } from "../src/config/file_watch.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { spawnService, waitFor } from "./_service.ts";

const ALLOW = JSON.stringify({ default: "allow", rules: [] });
const DENY = JSON.stringify({ default: "deny", rules: [] });

/**
 * A ConfigMap as Kubernetes mounts it: `policy.json` → `..data/policy.json`, `..data` → a dated
 * directory; an update writes a new directory and swaps `..data` in one rename.
 */
async function configMap(text: string) {
  const dir = await Deno.makeTempDir();
  let version = 0;
  const publish = async (content: string) => {
    const dated = `..${++version}`;
    await Deno.mkdir(`${dir}/${dated}`);
    await Deno.writeTextFile(`${dir}/${dated}/policy.json`, content);
    await Deno.symlink(dated, `${dir}/..data_tmp`);
    await Deno.rename(`${dir}/..data_tmp`, `${dir}/..data`);
  };
  await publish(text);
  await Deno.symlink("..data/policy.json", `${dir}/policy.json`);
  return {
    path: `${dir}/policy.json`,
    publish,
    remove: () => Deno.remove(dir, { recursive: true }),
  };
}

Deno.test("policy watch: a symlink swap is reloaded once; a broken file is reported once and the policy stays", async () => {
  const map = await configMap(ALLOW);
  try {
    const holder = createCallPolicyHolder(readPolicyFile(map.path), () => {});
    const reloads: Reload["kind"][] = [];
    const watch = watchFile(holder, (reload) => reloads.push(reload.kind));
    await watch.check();
    assert.deepEqual(reloads, [], "an unchanged file is not reloaded");

    await map.publish(DENY);
    await watch.check();
    await watch.check();
    assert.deepEqual(reloads, ["reloaded"]);
    assert.equal(holder.current()?.defaultEffect, "deny");

    await map.publish("{ broken");
    await watch.check();
    await watch.check();
    await watch.check();
    assert.deepEqual(reloads, ["reloaded", "kept"], "reported once, not at every check");
    assert.equal(holder.current()?.defaultEffect, "deny", "the policy in force stays");

    await map.publish(ALLOW);
    await watch.check();
    await watch.check();
    assert.deepEqual(reloads, ["reloaded", "kept", "reloaded"]);
    assert.equal(holder.current()?.defaultEffect, "allow");
    watch.stop();
  } finally {
    await map.remove();
  }
});

Deno.test(
  "policy watch: a running service reloads a swapped file within 10 s, and takes SIGHUP at the pid it logs",
  {
    ignore: Deno.build.os === "windows",
  },
  async () => {
    const map = await configMap(ALLOW);
    const service = await spawnService({
      GITLAB_CLIENT_ID: "app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: ":memory:",
      MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
      MCP_POLICY_FILE: map.path,
    });
    const reloaded = () =>
      service.logs.filter((line) => line.includes("MCP_POLICY_FILE reloaded")).length;
    try {
      const { pid } = service.listening as { pid?: number };
      assert.equal(typeof pid, "number");
      Deno.kill(pid!, "SIGHUP");
      await waitFor(() => reloaded() === 1);

      await map.publish(DENY);
      await waitFor(() => reloaded() === 2, 10_000);
      assert.equal(await service.stop(), 0);
    } finally {
      await service.stop();
      await map.remove();
    }
  },
);

Deno.test("policy watch: a check reads asynchronously, one at a time, and is not repeated by a reload during it", async () => {
  const map = await configMap(ALLOW);
  try {
    const holder = createCallPolicyHolder(readPolicyFile(map.path), () => {});
    const reloads: Reload["kind"][] = [];
    // Reads wait at the gate while it is shut.
    let gate = Promise.withResolvers<void>();
    gate.resolve();
    let reads = 0;
    const readText = async (path: string) => {
      reads++;
      const text = await Deno.readTextFile(path);
      await gate.promise;
      return text;
    };
    const watch = watchFile(holder, (reload) => reloads.push(reload.kind), { readText });
    await watch.check();
    assert.equal(reads, 2, "the start's read, and the check's");

    gate = Promise.withResolvers();
    await map.publish(DENY);
    const checking = watch.check();
    assert.equal(watch.check(), checking, "a check still reading is not started again");
    assert.equal(reads, 3);
    assert.equal(holder.current()?.defaultEffect, "allow", "nothing applied before the read ends");

    assert.equal(watch.reload().kind, "reloaded", "SIGHUP while the check reads");
    gate.resolve();
    await checking;
    assert.deepEqual(reloads, [], "the reload applied what the check read: not applied twice");
    assert.equal(holder.current()?.defaultEffect, "deny");

    await watch.check();
    assert.deepEqual(reloads, [], "the next check compares with what the reload read");
    await map.publish(ALLOW);
    await watch.check();
    await watch.check();
    assert.deepEqual(reloads, ["reloaded"]);
    watch.stop();
  } finally {
    await map.remove();
  }
});

Deno.test("policy watch: the policy applied is the text that held still, not the file read again after a later write", async () => {
  const map = await configMap(ALLOW);
  try {
    const holder = createCallPolicyHolder(readPolicyFile(map.path), () => {});
    const reloads: Reload["kind"][] = [];
    /** Runs once after the watch's next read, before that read returns. */
    let afterRead: (() => Promise<void>) | undefined;
    const readText = async (path: string) => {
      const text = await Deno.readTextFile(path);
      const then = afterRead;
      afterRead = undefined;
      await then?.();
      return text;
    };
    const watch = watchFile(holder, (reload) => reloads.push(reload.kind), { readText });
    await map.publish(DENY);
    await watch.check();
    // The next update lands right after the read that finds DENY held still.
    afterRead = () => map.publish(ALLOW);
    await watch.check();
    assert.deepEqual(reloads, ["reloaded"]);
    assert.equal(holder.current()?.defaultEffect, "deny");
    watch.stop();
  } finally {
    await map.remove();
  }
});
