/**
 * The container (issue 38 §3), without a container runtime: the image's command is run as
 * Deno runs it in the image, its folders mapped to temporary ones, and reads a policy file
 * from the configuration folder; compose mounts that folder read-only, runs the service with a
 * read-only root filesystem, and its health check, run here as compose would, asks the port
 * the service listens on.
 */

import assert from "node:assert/strict";
import { parse } from "yaml";
import { TEST_SECRET } from "./_helpers.ts";
import { spawnService } from "./_service.ts";
import { SHUTDOWN_GRACE_MS } from "../main.ts";
import { listConfigVariables } from "../src/app/config.ts";
import { IMAGE_CONFIG_FOLDER } from "../src/config/unreadable.ts";

const DEPLOY = new URL("../deploy/", import.meta.url);
const MAIN = new URL("../main.ts", import.meta.url).pathname;
/**
 * The folder the image reads configuration files from (docs/operating.md "Ways to run it"), as
 * the service names it in a start-up error.
 */
const CONFIG_FOLDER = IMAGE_CONFIG_FOLDER;

function read(name: string): Promise<string> {
  return Deno.readTextFile(new URL(name, DEPLOY));
}

/** The Dockerfile's `CMD` (exec form). */
async function imageCommand(): Promise<string[]> {
  const dockerfile = await read("Dockerfile");
  return JSON.parse(dockerfile.match(/^CMD (\[.*\])$/m)?.[1] ?? "[]");
}

/** compose.yaml's `auth` service. */
async function composeAuth(): Promise<Record<string, unknown>> {
  return parse(await read("compose.yaml")).services.auth;
}

/** A `--allow-read=`/`--allow-write=` flag's paths. */
function allowed(command: string[], flag: string): string[] {
  return command.find((arg) => arg.startsWith(`${flag}=`))?.split("=")[1].split(",") ?? [];
}

Deno.test("deploy/: the image may read its configuration folder and write only its volume; compose mounts the folder read-only on a read-only root", async () => {
  const command = await imageCommand();
  assert.ok(allowed(command, "--allow-read").includes(CONFIG_FOLDER));
  assert.deepEqual(allowed(command, "--allow-write"), ["/data"]);
  const auth = await composeAuth();
  assert.equal(auth.read_only, true);
  const volumes = auth.volumes as string[];
  const mount = volumes.find((volume) => volume.split(":")[1] === CONFIG_FOLDER);
  assert.ok(mount !== undefined && mount.endsWith(":ro"), `${CONFIG_FOLDER} mounted read-only`);
  const source = new URL(`${mount.split(":")[0]}/`, DEPLOY);
  assert.ok((await Deno.stat(source)).isDirectory, `${source} is in the repository`);
  // Whatever an operator puts there stays out of git.
  assert.match(await Deno.readTextFile(new URL(".gitignore", source)), /^\*$/m);
});

Deno.test("deploy/: the image's command reads a policy file from the configuration folder", async () => {
  const dir = await Deno.makeTempDir({ prefix: "container-" });
  await Deno.mkdir(`${dir}/data`);
  await Deno.mkdir(`${dir}/config`);
  const policy = `${dir}/config/policy.json`;
  await Deno.writeTextFile(
    policy,
    JSON.stringify({ rules: [{ tools: ["delete_*"], deny: { users: ["mallory"] } }] }),
  );
  // The image's folders, here: /data and the configuration folder under `dir`.
  const args = (await imageCommand()).map((arg) =>
    arg.replaceAll(CONFIG_FOLDER, `${dir}/config`).replaceAll("/data", `${dir}/data`)
      .replace(/^main\.ts$/, MAIN)
  );
  const service = await spawnService({
    GITLAB_CLIENT_ID: "container-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/data/kv.sqlite`,
    MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
    MCP_POLICY_FILE: policy,
  }, args);
  try {
    assert.equal((await fetch(`${service.url}/readyz`).then((r) => r.json())).status, "ok");
    assert.ok(service.logs.every((line) => !line.includes("configuration error")));
  } finally {
    assert.equal(await service.stop(), 0);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deploy/: the health checks (image and compose) ask the port the service listens on", async () => {
  const auth = await composeAuth();
  const environment = auth.environment as Record<string, string>;
  assert.equal(environment.PORT, "${PORT:-8000}", "compose sets the port it checks");
  assert.deepEqual(auth.expose, ["${PORT:-8000}"]);
  const caddy = parse(await read("compose.yaml")).services.caddy.environment;
  assert.equal(caddy.AUTH_UPSTREAM, "auth:${PORT:-8000}", "Caddy proxies to that port");
  assert.match(await read("Caddyfile"), /reverse_proxy \{\$AUTH_UPSTREAM\}/);
  const [kind, ...composeCheck] = (auth.healthcheck as { test: string[] }).test;
  assert.equal(kind, "CMD");
  const dockerfile = await read("Dockerfile");
  const imageCheck = JSON.parse(dockerfile.match(/^ {2}CMD (\[.*\])$/m)?.[1] ?? "[]");
  // A service on a port other than the image's default: each check runs as in the container.
  const dir = await Deno.makeTempDir({ prefix: "healthcheck-" });
  const service = await spawnService({
    GITLAB_CLIENT_ID: "health-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/kv.sqlite`,
  });
  try {
    const port = new URL(service.url).port;
    assert.notEqual(port, "8000");
    for (const check of [composeCheck, imageCheck]) {
      assert.equal(check[0], "deno");
      const run = await new Deno.Command(Deno.execPath(), {
        args: check.slice(1),
        env: { PORT: port },
        stdout: "null",
        stderr: "null",
      }).output();
      assert.equal(run.code, 0, `${check.join(" ")} with PORT=${port}`);
    }
  } finally {
    await service.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

/** A compose duration (`20s`, `1m30s`) in seconds; compose's default stop timeout is 10 s. */
function composeSeconds(duration: unknown): number {
  if (duration === undefined) return 10;
  const parts = [...String(duration).matchAll(/(\d+)(h|m|s)/g)];
  const unit = { h: 3600, m: 60, s: 1 } as const;
  return parts.reduce((sum, [, n, u]) => sum + Number(n) * unit[u as keyof typeof unit], 0);
}

Deno.test("deploy/: compose and the unit wait for the service's drain before they kill it", async () => {
  const drainSeconds = SHUTDOWN_GRACE_MS / 1000;
  const auth = await composeAuth();
  assert.ok(
    composeSeconds(auth.stop_grace_period) > drainSeconds,
    `compose's stop_grace_period (${
      auth.stop_grace_period ?? "10s, the default"
    }) > ${drainSeconds} s`,
  );
  const unit = await read("gitlab-mcp-auth.service");
  const timeout = Number(unit.match(/^TimeoutStopSec=(\d+)$/m)?.[1] ?? "90");
  assert.ok(timeout > drainSeconds, `TimeoutStopSec=${timeout} > ${drainSeconds}`);
});

Deno.test("deploy/: the image's configuration folder is said to hold every file the configuration names", async () => {
  const names = new Set(listConfigVariables().map((variable) => variable.name));
  // A secret's `<NAME>_FILE` is said once for all of them.
  const files = [...names].filter((name) =>
    name.endsWith("_FILE") && !names.has(name.slice(0, -"_FILE".length))
  );
  assert.ok(files.includes("MCP_POLICY_FILE"), files.join(" "));
  const operating = await Deno.readTextFile(new URL("../docs/operating.md", DEPLOY));
  const container = operating.split("- **Container**")[1]?.split("\n- **")[0] ?? "";
  const where: [string, string][] = [
    ["deploy/Dockerfile", await read("Dockerfile")],
    ["deploy/config/README.md", await read("config/README.md")],
    ["docs/operating.md (Container)", container],
  ];
  for (const [file, text] of where) {
    assert.match(text, /<NAME>_FILE/, file);
    const unnamed = files.filter((name) => !text.includes(name));
    assert.deepEqual(unnamed, [], `${file} names the files the image reads from ${CONFIG_FOLDER}`);
  }
});

/** The image's command as it is, its volume under `dir`, started with `env`: its exit and output. */
async function imageStartUp(
  dir: string,
  env: Record<string, string>,
): Promise<{ code: number; output: string }> {
  // The configuration folder stays /etc/gitlab-mcp-auth, readable whether or not it exists here.
  const args = (await imageCommand()).map((arg) =>
    arg.replaceAll("/data", `${dir}/data`).replace(/^main\.ts$/, MAIN)
  );
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args,
    env: {
      GITLAB_CLIENT_ID: "container-app",
      KV_PATH: `${dir}/data/kv.sqlite`,
      PORT: "0",
      HOST: "127.0.0.1",
      ...env,
    },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code, output: new TextDecoder().decode(stdout) + new TextDecoder().decode(stderr) };
}

Deno.test("deploy/: a `<NAME>_FILE` secret outside the image's configuration folder stops start-up with one line naming the folder it may read", async () => {
  const dir = await Deno.makeTempDir({ prefix: "container-" });
  await Deno.mkdir(`${dir}/data`);
  // Where compose's `secrets:` would put it, not where the image reads configuration from.
  const secret = `${dir}/run-secrets-jwt`;
  await Deno.writeTextFile(secret, `${TEST_SECRET}\n`);
  try {
    const { code, output } = await imageStartUp(dir, { JWT_SECRET_FILE: secret });
    assert.equal(code, 1, output);
    const lines = output.trim().split("\n");
    assert.equal(lines.length, 1, output);
    assert.match(lines[0], /JWT_SECRET_FILE/, output);
    assert.ok(lines[0].includes(secret), output);
    assert.ok(lines[0].includes(`${CONFIG_FOLDER}`), `the line names ${CONFIG_FOLDER}: ${output}`);
    assert.ok(!lines[0].includes(TEST_SECRET), "never the content");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deploy/: every configuration file outside the image's configuration folder stops start-up with one line naming the folder it may read", async () => {
  const dir = await Deno.makeTempDir({ prefix: "container-" });
  await Deno.mkdir(`${dir}/data`);
  // Outside both of the image's folders, as a Docker secret at /run/secrets is.
  const outside = `${dir}/run-secrets`;
  await Deno.mkdir(outside);
  const files = {
    servers: `${outside}/servers.yaml`,
    policy: `${outside}/policy.json`,
    access: `${outside}/access.yaml`,
    keys: `${outside}/keys.json`,
    token: `${outside}/bot.token`,
  };
  await Deno.writeTextFile(
    files.servers,
    "servers:\n  - name: docs\n    url: http://127.0.0.1:9/mcp\n",
  );
  await Deno.writeTextFile(files.policy, JSON.stringify({ rules: [] }));
  await Deno.writeTextFile(files.access, "clients: []\n");
  await Deno.writeTextFile(files.keys, "[]");
  await Deno.writeTextFile(files.token, "glpat-outside\n");
  // Files the image may read (its volume, here) naming a file it may not.
  const named = { servers: `${dir}/data/servers.yaml`, access: `${dir}/data/access.yaml` };
  await Deno.writeTextFile(
    named.servers,
    `servers:\n  - name: docs\n    url: http://127.0.0.1:9/mcp\n    policy_file: ${files.policy}\n`,
  );
  await Deno.writeTextFile(
    named.access,
    `clients:\n  - client_id: bot\n    servers: [default]\n    gitlab_token_file: ${files.token}\n`,
  );
  const upstream = { MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp" };
  const cases: [string, Record<string, string>, string][] = [
    ["MCP_SERVERS_FILE", { MCP_SERVERS_FILE: files.servers }, files.servers],
    ["MCP_POLICY_FILE", { ...upstream, MCP_POLICY_FILE: files.policy }, files.policy],
    ["MACHINE_ACCESS_FILE", { ...upstream, MACHINE_ACCESS_FILE: files.access }, files.access],
    ["SIGNING_KEYS_FILE", { ACCESS_TOKEN_ALG: "ES256", SIGNING_KEYS_FILE: files.keys }, files.keys],
    ["MCP_SERVERS_FILE", { MCP_SERVERS_FILE: named.servers }, files.policy],
    ["MACHINE_ACCESS_FILE", { ...upstream, MACHINE_ACCESS_FILE: named.access }, files.token],
  ];
  try {
    const runs = await Promise.allSettled(cases.map(async ([variable, env, unreadable]) => {
      const { code, output } = await imageStartUp(dir, { JWT_SECRET: TEST_SECRET, ...env });
      const lines = output.trim().split("\n");
      assert.equal(code, 1, output);
      assert.equal(lines.length, 1, output);
      assert.ok(lines[0].includes(variable), `${variable}: ${output}`);
      assert.ok(lines[0].includes(unreadable), `${unreadable}: ${output}`);
      assert.ok(lines[0].includes("NotCapable"), output);
      assert.ok(lines[0].includes(CONFIG_FOLDER), `the line names ${CONFIG_FOLDER}: ${output}`);
      assert.ok(!lines[0].includes("glpat-outside"), "never a token");
    }));
    const failed = runs.flatMap((run) => run.status === "rejected" ? [String(run.reason)] : []);
    assert.deepEqual(failed, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
