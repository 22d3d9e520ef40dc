/**
 * What `deno task start`, `deno task demo` and `deno task sim-gitlab` download (issue 33 §2.7):
 * only the npm packages their own module graph reaches, never the tests' and benchmarks'
 * (Playwright, the conformance suites, SDK v1 with express and hono, ...).
 *
 * Deno installs every package of the lockfile its configuration names, whatever the entry point
 * needs (and `deno task` does so before the task runs), so the graph alone proves nothing: the
 * service's deno.json and the demo's dev/deno.json each have a lockfile holding exactly their
 * entry's npm closure, and tests/deno.json holds the rest. The last test measures it: each task
 * run with an empty DENO_DIR fetches exactly its closure.
 */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);

/** Packages only tests, benchmarks and dev tools use: none may reach a task's download. */
const TEST_ONLY = [
  "playwright-core",
  "@modelcontextprotocol/sdk",
  "@modelcontextprotocol/client",
  "@modelcontextprotocol/conformance",
  "oauth4webapi",
  "parse-prometheus-text-format",
  "@peculiar/x509",
  "express",
  "hono",
  "@hono/node-server",
  "@octokit/rest",
];

/** A task, the entry point it runs, and the configuration it runs it with. */
interface Task {
  name: string;
  entry: string;
  /** undefined: the one Deno finds itself (the entry's folder, then up). */
  config?: string;
}

const TASKS: Task[] = [
  { name: "start", entry: "main.ts" },
  { name: "demo", entry: "dev/demo.ts", config: "dev/deno.json" },
  // Named: `deno run` looks for a configuration from the entry's folder up, and dev/ has the
  // demo's.
  { name: "sim-gitlab", entry: "dev/sim_gitlab.ts", config: "deno.json" },
];

interface DenoInfo {
  modules: { kind: string; npmPackage?: string }[];
  npmPackages: Record<string, { name: string; version: string; dependencies?: string[] }>;
}

async function denoInfo(task: Task): Promise<DenoInfo> {
  const config = task.config ? ["--config", task.config] : [];
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", ...config, task.entry],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  return JSON.parse(new TextDecoder().decode(output.stdout));
}

/** `name@version` of every npm package the entry's modules import, and their dependencies. */
function npmClosure(info: DenoInfo): Set<string> {
  const seen = new Set<string>();
  const pending = info.modules.flatMap((module) => module.npmPackage ?? []);
  while (pending.length > 0) {
    const id = pending.pop() ?? "";
    if (seen.has(id)) continue;
    seen.add(id);
    pending.push(...info.npmPackages[id]?.dependencies ?? []);
  }
  return new Set([...seen].map((id) => {
    const { name, version } = info.npmPackages[id];
    return `${name}@${version}`;
  }));
}

/** `name@version` of every npm package in a lockfile. */
async function lockedPackages(lockPath: string): Promise<Set<string>> {
  const lock = JSON.parse(await Deno.readTextFile(new URL(lockPath, ROOT)));
  // Keys are `name@version`, with `_peer@version` suffixes for peer dependencies.
  return new Set(Object.keys(lock.npm ?? {}).map((key) => key.split("_")[0]));
}

function lockOf(task: Task): string {
  return (task.config ?? "deno.json").replace(/deno\.json$/, "deno.lock");
}

function namesOf(packages: Set<string>): string[] {
  return [...packages].map((id) => id.slice(0, id.lastIndexOf("@")));
}

Deno.test("each task's lockfile holds exactly the npm closure of its entry point, no test package", async (t) => {
  for (const task of TASKS) {
    await t.step(`deno task ${task.name}`, async () => {
      const closure = npmClosure(await denoInfo(task));
      const names = namesOf(closure);
      for (const testOnly of TEST_ONLY) {
        assert.ok(!names.includes(testOnly), `${testOnly} is reachable from ${task.entry}`);
      }
      const locked = await lockedPackages(lockOf(task));
      // The lock may hold more than this entry needs only where another task shares it.
      const sharing = TASKS.filter((other) => lockOf(other) === lockOf(task));
      const needed = new Set<string>();
      for (const other of sharing) {
        for (const id of npmClosure(await denoInfo(other))) needed.add(id);
      }
      assert.deepEqual([...locked].sort(), [...needed].sort(), `${lockOf(task)} vs its graphs`);
    });
  }
});

Deno.test("deno.json's tasks run their entry points with the configurations whose locks are checked above", async () => {
  const root = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  for (const task of TASKS) {
    const command: string = root.tasks[task.name];
    assert.ok(command, `task ${task.name}`);
    assert.ok(command.includes(` ${task.entry}`), command);
    if (task.config) assert.ok(command.includes(`--config ${task.config}`), command);
    else assert.doesNotMatch(command, /--config|--lock|--no-lock/);
  }
  // A lock Deno may not rewrite: an import added without its lock entry fails loudly instead of
  // fetching (and recording) whatever the registry has that day.
  for (const config of ["deno.json", "dev/deno.json"]) {
    const { lock } = JSON.parse(await Deno.readTextFile(new URL(config, ROOT)));
    assert.deepEqual(lock, { path: "./deno.lock", frozen: true }, config);
  }
});

Deno.test("the three configurations agree: same imports where they overlap, same versions locked, same fmt and lint", async () => {
  const read = async (path: string) => JSON.parse(await Deno.readTextFile(new URL(path, ROOT)));
  const [service, demo, tests] = await Promise.all(
    ["deno.json", "dev/deno.json", "tests/deno.json"].map(read),
  );
  for (const [name, target] of Object.entries(service.imports)) {
    assert.equal(demo.imports[name], target, `dev/deno.json ${name}`);
  }
  for (const [name, target] of Object.entries(demo.imports)) {
    assert.equal(tests.imports[name], target, `tests/deno.json ${name}`);
  }
  for (const config of [demo, tests]) {
    assert.deepEqual(config.fmt, service.fmt);
    assert.deepEqual(config.lint, service.lint);
    assert.deepEqual(config.unstable, service.unstable);
  }
  const locks = await Promise.all(["deno.lock", "dev/deno.lock", "tests/deno.lock"].map(read));
  const [serviceLock] = locks;
  for (const lock of locks.slice(1)) {
    for (const [specifier, version] of Object.entries(serviceLock.specifiers)) {
      assert.equal(lock.specifiers[specifier], version, specifier);
    }
  }
});

/** `name@version` of every npm package in a DENO_DIR's cache. */
async function cachedPackages(denoDir: string): Promise<Set<string>> {
  const registry = `${denoDir}/npm/registry.npmjs.org`;
  const found = new Set<string>();
  const list = async (path: string) => {
    try {
      const names: string[] = [];
      for await (const entry of Deno.readDir(path)) if (entry.isDirectory) names.push(entry.name);
      return names;
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return [];
      throw error;
    }
  };
  for (const top of await list(registry)) {
    const names = top.startsWith("@")
      ? (await list(`${registry}/${top}`)).map((name) => `${top}/${name}`)
      : [top];
    for (const name of names) {
      for (const version of await list(`${registry}/${name}`)) found.add(`${name}@${version}`);
    }
  }
  return found;
}

const REGISTRY_UNREACHABLE = await fetch("https://registry.npmjs.org/jose", { method: "HEAD" })
  .then((response) => (response.body?.cancel(), !response.ok))
  .catch(() => true);

Deno.test({
  name:
    "measured: with an empty DENO_DIR, start and demo download exactly their entry's npm closure, sim-gitlab no more than start",
  // Offline machines cannot measure a download; CI must.
  ignore: REGISTRY_UNREACHABLE && !Deno.env.get("CI"),
  async fn(t) {
    const start = npmClosure(await denoInfo(TASKS[0]));
    for (const task of TASKS) {
      await t.step(`deno task ${task.name}`, async () => {
        // `deno task` installs the repository's lock before any task: sim-gitlab, whose own
        // graph is smaller, gets the service's packages (an operator runs both anyway).
        const expected = task.name === "sim-gitlab" ? start : npmClosure(await denoInfo(task));
        const denoDir = await Deno.makeTempDir({ prefix: "task-graph-deno-dir-" });
        try {
          // An invalid port stops each task after its modules loaded, before it listens.
          const output = await new Deno.Command(Deno.execPath(), {
            args: ["task", task.name, ...(task.name === "sim-gitlab" ? ["--port", "x"] : [])],
            cwd: ROOT,
            env: { DENO_DIR: denoDir, PORT: "not-a-port", NO_COLOR: "1" },
            stdin: "null",
            stdout: "piped",
            stderr: "piped",
          }).output();
          const text = new TextDecoder().decode(output.stdout) +
            new TextDecoder().decode(output.stderr);
          assert.notEqual(output.code, 0, "the invalid port stops it");
          assert.match(text, /port/i, text);
          assert.deepEqual([...await cachedPackages(denoDir)].sort(), [...expected].sort());
        } finally {
          await Deno.remove(denoDir, { recursive: true });
        }
      });
    }
  },
});
