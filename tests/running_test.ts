/**
 * Every Deno way to run the service, as a user starts it: `deno serve main.ts` (also
 * `--parallel` over one KV file), `deno run main.ts start` with no permission to read or write
 * files, main.ts as Deno Deploy may run it, a port already taken (by the service and by the
 * demo), and the module graph that `deno compile` would embed.
 */

import assert from "node:assert/strict";
import { assertOneWinner, TEST_SECRET } from "./_helpers.ts";
import {
  demoRunArgs,
  denoServeArgs,
  fetchJson,
  postToken,
  signInOverHttp,
  spawnWithGitLab,
  waitFor,
} from "./_service.ts";

const ROOT = new URL("../", import.meta.url);
const MAIN = new URL("main.ts", ROOT).pathname;

Deno.test("deno serve main.ts: the default export serves a whole sign-in, configured from the environment", async () => {
  const { gitlab, service, close } = await spawnWithGitLab("serve-app", {}, denoServeArgs());
  try {
    assert.deepEqual(await fetchJson(`${service.url}/readyz`), {
      status: 200,
      body: { status: "ok", checks: { kv: "ok", configuration: "ok" } },
    });
    const tokens = await signInOverHttp(service.url, gitlab);
    assert.equal(tokens.token_type, "Bearer");
  } finally {
    await close();
  }
  assert.ok(service.logs.some((line) => line.includes('"listening"')));
  for (const line of service.logs) JSON.parse(line);
});

Deno.test("deno serve --parallel: workers on one KV file, one refresh token raced, one winner", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-parallel-" });
  const env = { KV_PATH: `${dir}/kv.sqlite`, DENO_JOBS: "2" };
  const { gitlab, service, close } = await spawnWithGitLab(
    "parallel-app",
    env,
    denoServeArgs(["--parallel"]),
  );
  try {
    // deno serve --parallel loses a SIGTERM that arrives while a worker is still starting.
    await waitFor(() =>
      service.logs.filter((line) => line.includes('"ready to serve"')).length === 2
    );
    const { refresh_token } = await signInOverHttp(service.url, gitlab);
    const results = await Promise.all(
      Array.from(
        { length: 12 },
        () => postToken(service.url, { grant_type: "refresh_token", refresh_token }),
      ),
    );
    assertOneWinner(results);
  } finally {
    await close();
    await Deno.remove(dir, { recursive: true });
  }
  // Every worker logs plain JSON lines: no `[serve-worker-n]` prefix from console.
  for (const line of service.logs) JSON.parse(line);
  assert.deepEqual(service.logs.filter((line) => line.includes('"status":500')), []);
});

Deno.test("deno run main.ts start: serves the sign-in page without permission to read or write files", async () => {
  const { service, close } = await spawnWithGitLab("no-files-app", {}, [
    "run",
    "--allow-net",
    "--allow-env",
    MAIN,
    "start",
  ]);
  try {
    const page = await fetch(
      `${service.url}/authorize?response_type=code&client_id=c&code_challenge=${
        "x".repeat(43)
      }&code_challenge_method=S256&redirect_uri=http://127.0.0.1:9/cb`,
    );
    assert.equal(page.status, 200);
    assert.match(await page.text(), /Sign in with GitLab/);
  } finally {
    await close();
  }
  // Up to its exit, JSON lines only: no "did you mean to run deno serve?" from Deno.
  for (const line of service.logs) JSON.parse(line);
});

Deno.test("Deno Deploy (DENO_DEPLOYMENT_ID set): main.ts without arguments listens itself", async () => {
  // As the platform may run it: no `start`, no file permissions, no default export served.
  const { gitlab, service, close } = await spawnWithGitLab(
    "deploy-app",
    { DENO_DEPLOYMENT_ID: "test-deployment" },
    ["run", "--allow-net", "--allow-env", MAIN],
  );
  try {
    const tokens = await signInOverHttp(service.url, gitlab);
    assert.equal(tokens.token_type, "Bearer");
  } finally {
    await close();
  }
  for (const line of service.logs) JSON.parse(line);
});

Deno.test("PORT already in use: one line naming the port and PORT, exit 1, no stack trace", async (t) => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = String(taken.addr.port);
  const env = { PORT: port, HOST: "127.0.0.1", KV_PATH: ":memory:", JWT_SECRET: TEST_SECRET };
  await t.step("deno task start", async () => {
    const output = await runToExit(["run", "--allow-all", MAIN, "start"], env);
    assert.equal(output.code, 1);
    assertOneLineNaming(output.lines.filter((line) => !line.includes('"warn"')), port);
  });
  await t.step("deno task demo", async () => {
    const output = await runToExit(demoRunArgs(["--allow-all"]), env);
    assert.equal(output.code, 1);
    assertOneLineNaming(output.lines, port);
  });
});

Deno.test("HOST that is no address of this host: one line naming HOST, exit 1, no stack trace", async () => {
  for (const host of ["exa mple", "256.1.1.1", "no-such-host.invalid"]) {
    const env = { PORT: "0", HOST: host, KV_PATH: ":memory:", JWT_SECRET: TEST_SECRET };
    const output = await runToExit(["run", "--allow-all", MAIN, "start"], env);
    assert.equal(output.code, 1, host);
    const lines = output.lines.filter((line) => !line.includes('"warn"'));
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(lines[0], /configuration error: HOST: cannot listen on /, host);
    assert.doesNotMatch(lines[0], /\bat \S+:\d+/, "no stack trace");
  }
});

Deno.test("KV_PATH in a folder that does not exist: one line naming KV_PATH and the folder, exit 1", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "kv-folder-" });
  const folder = `${dir}/not-created`;
  const env = {
    HOST: "127.0.0.1",
    PORT: "0",
    KV_PATH: `${folder}/kv.sqlite`,
    JWT_SECRET: TEST_SECRET,
  };
  try {
    const ways: [string, string[]][] = [
      ["deno task start", ["run", "--allow-all", MAIN, "start"]],
      ["deno serve", ["serve", "--allow-all", "--port", "0", MAIN]],
    ];
    for (const [how, args] of ways) {
      await t.step(how, async () => {
        const output = await runToExit(args, env);
        assert.equal(output.code, 1);
        const lines = output.lines.filter((line) => !line.includes('"warn"'));
        assert.equal(lines.length, 1, lines.join("\n"));
        assert.match(lines[0], /configuration error: KV_PATH: /);
        assert.ok(lines[0].includes(`the folder ${folder} does not exist`), lines[0]);
        assert.doesNotMatch(lines[0], /\bat \S+:\d+/, "no stack trace");
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("main.ts's module graph holds only what the service runs (what deno compile embeds)", async () => {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", MAIN],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  const { modules } = JSON.parse(new TextDecoder().decode(output.stdout)) as {
    modules: { specifier: string }[];
  };
  const specifiers = modules.map((module) => module.specifier);
  for (const testOnly of ["playwright-core", "@modelcontextprotocol/sdk", "oauth4webapi"]) {
    assert.ok(
      !specifiers.some((specifier) => specifier.includes(testOnly)),
      `${testOnly} is reachable from main.ts`,
    );
  }
  // Nothing from tests/, dev/ or bench/; and exactly what deploy/Dockerfile copies.
  const shipped = ["main.ts", "src/", "templates/"].map((path) => new URL(path, ROOT).href);
  const local = specifiers.filter((specifier) => specifier.startsWith("file:"));
  const elsewhere = local.filter((file) => !shipped.some((path) => file.startsWith(path)));
  assert.deepEqual(elsewhere, [], "reachable from main.ts outside main.ts, src/ and templates/");
  // The templates are static text imports, so the executable embeds them without --include.
  for (const template of ["device.html", "device.js", "home.html"]) {
    assert.ok(specifiers.includes(new URL(`templates/${template}`, ROOT).href), template);
  }
  const npm = specifiers.filter((specifier) => specifier.startsWith("npm:"));
  // The runtime's own npm packages; a new one is a deliberate change of this list.
  assert.deepEqual(npm.map((specifier) => specifier.replace(/@\d[^/]*/, "")), [
    "npm:/@noble/hashes/hmac.js",
    "npm:/@noble/hashes/sha2.js",
    "npm:/@opentelemetry/api",
    "npm:/ipaddr.js",
    "npm:/jose",
    "npm:/postgres",
    "npm:/yaml",
  ]);
  // docs/operating.md says which of them the executable embeds: all of them.
  const operating = await Deno.readTextFile(new URL("docs/operating.md", ROOT));
  const executable = operating.split("- **One executable**")[1]?.split("\n- **")[0] ?? "";
  const packages = new Set(
    npm.map((specifier) => specifier.match(/^npm:\/(@?[^@/]+(?:\/[^@/]+)?)@/)?.[1]),
  );
  for (const name of packages) assert.ok(executable.includes(`\`${name}\``), `docs name ${name}`);
  const tasks = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT))).tasks;
  // Without the flag, compile embeds every npm package of the lockfile (the test-only ones).
  assert.match(tasks.compile, /--exclude-unused-npm .* main\.ts$/);
  assert.doesNotMatch(tasks.compile, /--include/);
});

async function runToExit(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; lines: string[] }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args,
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stdout) + new TextDecoder().decode(output.stderr);
  return { code: output.code, lines: text.split("\n").filter((line) => line.trim() !== "") };
}

function assertOneLineNaming(lines: string[], port: string): void {
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.match(lines[0], new RegExp(`\\b${port}\\b`));
  assert.match(lines[0], /\bPORT\b/);
  assert.doesNotMatch(lines[0], /\bat \S+:\d+/, "no stack trace");
}
