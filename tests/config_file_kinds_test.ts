/**
 * A file the configuration names must be a regular file of a bounded size: a `<NAME>_FILE`, a
 * configuration file or a file one names pointing at a FIFO (whose opening waits for a writer),
 * /dev/zero, /dev/urandom or a huge file hung start-up or read without end. Each now stops
 * start-up (and `admin config check`) with one line naming the variable and the path, never what
 * the file holds; a hang fails these tests at their timeout.
 */

import assert from "node:assert/strict";
import { TEST_SECRET } from "./_helpers.ts";
import { runAdminCli, spawnService, waitFor } from "./_service.ts";

const CONFIGURED = { GITLAB_CLIENT_ID: "app", KV_PATH: ":memory:" };
/** Far more than a refusal takes on a busy machine; a start-up that hangs is killed at this. */
const HANG_MS = 20_000;

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "config-file-kinds-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function mkfifo(path: string): Promise<string> {
  const made = await new Deno.Command("mkfifo", { args: [path] }).output();
  assert.equal(made.code, 0, new TextDecoder().decode(made.stderr));
  return path;
}

/** The error lines of a start-up that must stop (warnings left out); fails if it listens or hangs. */
async function refusedStartup(env: Record<string, string>): Promise<string[]> {
  let message = "";
  try {
    const service = await spawnService({ ...CONFIGURED, ...env }, undefined, {
      timeoutMs: HANG_MS,
    });
    await service.stop();
    assert.fail(`the service started with ${JSON.stringify(env)}`);
  } catch (error) {
    message = (error as Error).message;
  }
  assert.doesNotMatch(message, /neither listening nor exited/, "start-up hung");
  const [, ...logs] = message.split("\n");
  return logs.filter((line) => line.trim() !== "" && !line.includes('"warn"'));
}

Deno.test("a secret's _FILE naming a FIFO or /dev/zero stops start-up in one line, without hanging", () =>
  withDir(async (dir) => {
    const fifo = await mkfifo(`${dir}/jwt-secret`);
    const lines = await refusedStartup({ JWT_SECRET_FILE: fifo });
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(
      lines[0],
      new RegExp(
        `configuration error: JWT_SECRET_FILE: cannot read ${fifo} \\(not a regular file\\)`,
      ),
    );
    const zero = await refusedStartup({ JWT_SECRET: TEST_SECRET, METRICS_TOKEN_FILE: "/dev/zero" });
    assert.equal(zero.length, 1, zero.join("\n"));
    assert.match(zero[0], /METRICS_TOKEN_FILE: cannot read \/dev\/zero \(not a regular file\)/);
  }));

Deno.test("a secret's _FILE larger than 64 KiB stops start-up in one line, never its content", () =>
  withDir(async (dir) => {
    const content = "secret-bytes-".repeat(6_000);
    await Deno.writeTextFile(`${dir}/jwt-secret`, content);
    const lines = await refusedStartup({ JWT_SECRET_FILE: `${dir}/jwt-secret` });
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(lines[0], /JWT_SECRET_FILE: cannot read .*jwt-secret \(larger than 64 KiB\)/);
    assert.ok(!lines[0].includes("secret-bytes-"), "never the content");
  }));

Deno.test("admin config check: every configuration file that is not a regular file of bounded size is one problem", () =>
  withDir(async (dir) => {
    const servers = await mkfifo(`${dir}/servers.yaml`);
    const tokenFifo = await mkfifo(`${dir}/gitlab-token`);
    await Deno.writeTextFile(
      `${dir}/access.yaml`,
      "ci:\n  - project: acme/app\n    servers: [default]\n    gitlab_token_file: gitlab-token\n",
    );
    // Sparse: 5 MiB long, nothing written.
    const policy = `${dir}/policy.yaml`;
    await Deno.writeTextFile(policy, "");
    await Deno.truncate(policy, 5 * 1024 * 1024);
    const run = await runAdminCli(["config", "check"], {
      ...CONFIGURED,
      JWT_SECRET: TEST_SECRET,
      MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
      MCP_SERVERS_FILE: servers,
      MCP_POLICY_FILE: policy,
      MACHINE_ACCESS_FILE: `${dir}/access.yaml`,
      ACCESS_TOKEN_ALG: "ES256",
      SIGNING_KEYS_FILE: "/dev/urandom",
    }, { timeoutMs: HANG_MS });
    assert.equal(run.code, 1, `exit ${run.code} (143: it hung): ${run.stderr}`);
    const problems = run.stderr.split("\n").filter((line) => /^admin: (?!warning: )/.test(line));
    assert.deepEqual(problems.toSorted(), [
      `admin: MACHINE_ACCESS_FILE: ${dir}/access.yaml: ci rule 0 gitlab_token_file: cannot read ${tokenFifo} (not a regular file)`,
      `admin: MCP_POLICY_FILE: ${policy}: cannot read the file (larger than 4 MiB)`,
      `admin: MCP_SERVERS_FILE: ${servers}: cannot read the file (not a regular file)`,
      'admin: SIGNING_KEYS_FILE: cannot read "/dev/urandom" (not a regular file)',
    ]);
  }));

Deno.test(
  "SIGHUP with MACHINE_ACCESS_FILE replaced by a FIFO logs one error line and the service runs on",
  { ignore: Deno.build.os === "windows" },
  () =>
    withDir(async (dir) => {
      const file = `${dir}/access.yaml`;
      await Deno.writeTextFile(file, "clients:\n  - client_id: robot\n    servers: [default]\n");
      const service = await spawnService(
        {
          ...CONFIGURED,
          JWT_SECRET: TEST_SECRET,
          MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
          MACHINE_ACCESS_FILE: file,
        },
        undefined,
        { timeoutMs: HANG_MS },
      );
      const refused = () => service.logs.filter((line) => line.includes("MACHINE_ACCESS_FILE not"));
      try {
        await Deno.remove(file);
        await mkfifo(file);
        service.signal("SIGHUP");
        await waitFor(() => refused().length > 0, 5_000);
        assert.match(refused()[0], /"level":"error"/);
        assert.match(refused()[0], /access\.yaml: cannot read the file \(not a regular file\)/);
        const health = await fetch(`${service.url}/healthz`);
        await health.body?.cancel();
        assert.equal(health.status, 200, "the service runs on");
      } finally {
        await service.stop();
      }
    }),
);

Deno.test("admin config check --connect: a DATABASE_URL's sslrootcert naming a FIFO is one problem, without hanging", () =>
  withDir(async (dir) => {
    const fifo = await mkfifo(`${dir}/root.crt`);
    const run = await runAdminCli(["config", "check", "--connect"], {
      GITLAB_CLIENT_ID: "app",
      JWT_SECRET: TEST_SECRET,
      // Nothing listens there: the certificate is read before connecting.
      DATABASE_URL: `postgres://auth:pw@127.0.0.1:1/auth?sslmode=verify-full&sslrootcert=${fifo}`,
    }, { timeoutMs: HANG_MS });
    assert.equal(run.code, 1, `exit ${run.code} (143: it hung): ${run.stderr}`);
    assert.match(run.stderr, /sslrootcert .*root\.crt cannot be read \(not a regular file\)/);
  }));
