/**
 * A followed configuration file is applied only once it holds still: a file caught while it is
 * written (an editor truncating and writing it in two steps) is a valid YAML file cut short, and
 * must not be served even until the next check; a removed file, and one whose YAML aliases would
 * expand without end, keep what is in force and say so in one error line (the latter used to
 * escape the reader as a bare error and end the process). Over real HTTP against the app, the
 * watch's check called where its timer would, and the service as a process for SIGHUP.
 */

import assert from "node:assert/strict";
import { followConfigFiles } from "../src/app/file_reloads.ts";
import { createLogger } from "../src/logger.ts";
import {
  exchange,
  issueCode,
  makeTestApp,
  TEST_BASE,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { startScripted } from "./_gateway_mcp.ts";
import { mcpPostInit, spawnService, waitFor } from "./_service.ts";

/** A servers file whose aliases would expand to a million entries (yaml refuses to). */
const ALIAS_BOMB = [
  "a: &a [x, x, x, x, x, x, x, x, x, x]",
  ...["b", "c", "d", "e", "f"].map((name, i) =>
    `${name}: &${name} [${Array(10).fill(`*${"abcde"[i]}`).join(", ")}]`
  ),
  "servers: []",
  "",
].join("\n");

async function tokenFor(t: TestApp, resource: string): Promise<string> {
  const response = await exchange(t, await issueCode(t, { resource }));
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()).access_token;
}

/**
 * A running app following a servers file listing `a` and `b`, with a token for `b`; the watch
 * reads files with `readText` when given.
 */
async function withServersFile(
  fn: (rig: {
    file: string;
    /** The MCP server's URL, which `a` and `b` have. */
    mcpUrl: string;
    check: () => Promise<void>;
    postToB: () => Promise<number>;
    lines: Record<string, unknown>[];
    serversFileLines: () => Record<string, unknown>[];
  }) => Promise<void>,
  readText?: (path: string) => Promise<string>,
) {
  const mcp = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  const dir = await Deno.makeTempDir();
  const file = `${dir}/servers.yaml`;
  await Deno.writeTextFile(file, serversYaml(mcp.url, ["a", "b"]));
  const lines: Record<string, unknown>[] = [];
  const t = await makeTestApp({
    env: { MCP_SERVERS_FILE: file },
    logger: createLogger((line) => lines.push(JSON.parse(line))),
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  const files = followConfigFiles(t.deps, t.deps.logger, { readText });
  try {
    const token = await tokenFor(t, `${TEST_BASE}/mcp/b`);
    const postToB = async () => {
      const response = await fetch(
        `http://127.0.0.1:${server.addr.port}/mcp/b`,
        mcpPostInit(token),
      );
      await response.body?.cancel();
      return response.status;
    };
    const serversFileLines = () =>
      lines.filter((line) => String(line.message).startsWith("MCP_SERVERS_FILE"));
    await fn({ file, mcpUrl: mcp.url, check: files.check, postToB, lines, serversFileLines });
  } finally {
    files.stop();
    await server.shutdown();
    t.close();
    await mcp.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Reads in a row, each finding another content, after which the watch says it waits (~10 s). */
const UNSETTLED_READS = 10;

function serversYaml(url: string, names: string[]): string {
  return `servers:\n${names.map((name) => `  - name: ${name}\n    url: ${url}\n`).join("")}`;
}

Deno.test("file reload: a servers file caught half-written (valid YAML cut short) is not served; the whole file is, once it holds still", () =>
  withServersFile(async ({ file, check, postToB, serversFileLines }) => {
    assert.equal(await postToB(), 200);
    const whole = serversYaml("http://127.0.0.1:9/mcp", ["a", "b", "c"]);
    // The editor's first write: the file up to the end of server a's entry.
    const cut = whole.indexOf("  - name: b");
    await Deno.writeTextFile(file, whole.slice(0, cut));
    await check();
    assert.equal(await postToB(), 200, "b is still served: the cut file was not applied");
    assert.deepEqual(serversFileLines(), []);

    await Deno.writeTextFile(file, whole);
    await check();
    assert.deepEqual(serversFileLines(), [], "a content read once waits for a second read");
    await check();
    const [reloaded, ...more] = serversFileLines();
    assert.deepEqual(more, []);
    assert.equal(reloaded.message, "MCP_SERVERS_FILE reloaded");
    assert.equal(reloaded.added, "c");
    assert.equal(reloaded.removed, undefined, "b was never removed");
  }));

Deno.test("file reload: a servers file that changes at every read is not applied, and says so in one warning; it is once it holds still", () =>
  withServersFile(async ({ file, mcpUrl, check, postToB, serversFileLines }) => {
    const whole = serversYaml(mcpUrl, ["a", "b", "c"]);
    // A writer that rewrites the file more often than the watch reads it (a generated header
    // with the time, an autosave while typing): no two reads find the same content.
    for (let read = 1; read <= UNSETTLED_READS; read++) {
      await Deno.writeTextFile(file, `# written ${read}\n${whole}`);
      await check();
      const lines = serversFileLines();
      if (read < UNSETTLED_READS) assert.deepEqual(lines, [], `nothing said at read ${read}`);
    }
    const [unsettled, ...more] = serversFileLines();
    assert.deepEqual(more, []);
    assert.equal(unsettled.level, "warn");
    assert.match(
      String(unsettled.message),
      /^MCP_SERVERS_FILE not reloaded: it \(or a file it names\) changed at each of the last 10 reads/,
    );
    assert.equal(await postToB(), 200, "the servers in force stay");
    for (let read = 1; read <= UNSETTLED_READS; read++) {
      await Deno.writeTextFile(file, `# written again ${read}\n${whole}`);
      await check();
    }
    assert.equal(serversFileLines().length, 1, "one warning while it goes on changing");
    await check();
    const [, reloaded, ...after] = serversFileLines();
    assert.deepEqual(after, []);
    assert.equal(reloaded.message, "MCP_SERVERS_FILE reloaded", "applied once it held still");
    assert.equal(reloaded.added, "c");
  }));

Deno.test("file reload: each read of a small followed file holds about its size, not the 4 MiB a file may have", () =>
  withServersFile(async ({ check, postToB }) => {
    const before = Deno.memoryUsage().external;
    let most = 0;
    // Half a minute of checks at the timer's pace; a buffer of the bound per read held 4 MiB
    // each until the next garbage collection (an idle service's RSS swung by tens of MiB).
    for (let read = 0; read < 6; read++) {
      await check();
      most = Math.max(most, Deno.memoryUsage().external - before);
    }
    assert.ok(most < 1024 * 1024, `${most} bytes held by reads of a file of a few hundred`);
    assert.equal(await postToB(), 200);
  }));

Deno.test("file reload: what is applied is the text that held still, not the file read again after it, when a write may have landed", () => {
  /** Runs once after the watch's next read of the file, before the read returns. */
  let afterRead: ((path: string) => Promise<void>) | undefined;
  const readText = async (path: string) => {
    const text = await Deno.readTextFile(path);
    const then = afterRead;
    afterRead = undefined;
    await then?.(path);
    return text;
  };
  return withServersFile(async ({ file, mcpUrl, check, postToB, serversFileLines }) => {
    const whole = serversYaml(mcpUrl, ["a", "b", "c"]);
    await Deno.writeTextFile(file, whole);
    await check();
    // The next save starts right after the read that finds the file held still: the file is
    // truncated and holds server a's entry alone when the reload would read it again.
    afterRead = (path) => Deno.writeTextFile(path, whole.slice(0, whole.indexOf("  - name: b")));
    await check();
    const [reloaded, ...more] = serversFileLines();
    assert.deepEqual(more, []);
    assert.equal(reloaded.message, "MCP_SERVERS_FILE reloaded");
    assert.equal(reloaded.added, "c", "the text that held still is applied");
    assert.equal(reloaded.removed, undefined, "the cut file read after it is not");
    assert.equal(await postToB(), 200);
    // The cut file is a change like any other: not applied before it holds still.
    await check();
    assert.equal(serversFileLines().length, 1);
    assert.equal(await postToB(), 200);
  }, readText);
});

Deno.test("file reload: a removed servers file keeps the servers in force and says so in one error line", () =>
  withServersFile(async ({ file, check, postToB, serversFileLines }) => {
    await Deno.remove(file);
    await check();
    assert.deepEqual(serversFileLines(), [], "missing once is a swap in progress");
    await check();
    await check();
    const [kept, ...more] = serversFileLines();
    assert.deepEqual(more, [], "one line, not one per check");
    assert.equal(kept.level, "error");
    assert.match(
      String(kept.message),
      /^MCP_SERVERS_FILE not reloaded, the servers in force stay: .*servers\.yaml: cannot read the file \(NotFound\)/,
    );
    assert.equal(await postToB(), 200, "the servers in force stay");
  }));

Deno.test("file reload: a servers file of YAML aliases that would expand without end is refused with one error line; the servers stay", () =>
  withServersFile(async ({ file, check, postToB, serversFileLines }) => {
    await Deno.writeTextFile(file, ALIAS_BOMB);
    await check();
    await check();
    const [kept, ...more] = serversFileLines();
    assert.deepEqual(more, []);
    assert.equal(kept.level, "error");
    assert.match(
      String(kept.message),
      /^MCP_SERVERS_FILE not reloaded, the servers in force stay: .*servers\.yaml: not usable YAML \(Excessive alias count/,
    );
    assert.equal(await postToB(), 200, "the servers in force stay");
  }));

Deno.test(
  "file reload: SIGHUP with a machine access file of YAML aliases that would expand without end keeps the service running",
  { ignore: Deno.build.os === "windows" },
  async () => {
    const dir = await Deno.makeTempDir();
    const file = `${dir}/access.yaml`;
    await Deno.writeTextFile(file, "clients:\n  - client_id: robot\n    servers: [default]\n");
    const service = await spawnService({
      GITLAB_CLIENT_ID: "app",
      JWT_SECRET: TEST_SECRET,
      KV_PATH: ":memory:",
      MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
      MACHINE_ACCESS_FILE: file,
    });
    const refused = () => service.logs.filter((line) => line.includes("MACHINE_ACCESS_FILE not"));
    try {
      await Deno.writeTextFile(file, ALIAS_BOMB.replace("servers: []", "clients: []"));
      service.signal("SIGHUP");
      await waitFor(() => refused().length > 0, 5000);
      assert.match(refused()[0], /"level":"error"/);
      assert.match(refused()[0], /access\.yaml: not usable YAML \(Excessive alias count/);
      const health = await fetch(`${service.url}/healthz`);
      await health.body?.cancel();
      assert.equal(health.status, 200, "the service runs on");
      assert.equal(await service.stop(), 0);
    } finally {
      await service.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
);
