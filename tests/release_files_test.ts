/**
 * The release files hold together (issue 38 §6): CHANGELOG.md follows Keep a Changelog and its
 * newest version is the one in deno.json; .gitlab-ci.yml runs the gate on every pipeline and, on
 * a tag only, builds the image and the executables from what the repository has. GitLab CI cannot
 * run here, so its version job's script is run with bash instead, against copies of the files.
 */

import assert from "node:assert/strict";
import { dirname, join, resolve } from "node:path";
import { parse } from "yaml";

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), "..");

const read = (path: string) => Deno.readTextFile(join(ROOT, path));

// ---- CHANGELOG.md ----------------------------------------------------------------------------

/** The kinds of change Keep a Changelog 1.1.0 names. */
const KINDS = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"];

/** One `## [x] - date` section of the changelog. */
interface Release {
  version: string;
  date?: string;
  kinds: string[];
  entries: number;
}

/** The `## ` sections of a changelog, with the `### ` kinds and the `- ` entries of each. */
export function releases(changelog: string): Release[] {
  const found: Release[] = [];
  for (const line of changelog.split("\n")) {
    const heading = line.match(/^## (.*)$/);
    if (heading) {
      const m = heading[1].match(/^\[([^\]]+)\](?: - (\S+))?$/);
      assert.ok(m, `a release heading is "## [version] - YYYY-MM-DD": ${line}`);
      found.push({ version: m[1], date: m[2], kinds: [], entries: 0 });
      continue;
    }
    const current = found.at(-1);
    const kind = line.match(/^### (.*)$/);
    if (kind) {
      assert.ok(current, `${line} under a release`);
      current.kinds.push(kind[1]);
    } else if (/^- /.test(line) && current) current.entries++;
  }
  return found;
}

const SEMVER = /^(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.-]+)?$/;

function semverParts(version: string): number[] {
  const m = version.match(SEMVER);
  assert.ok(m, `${version} is a semantic version`);
  return m.slice(1, 4).map(Number);
}

function newerThan(a: string, b: string): boolean {
  const [x, y] = [semverParts(a), semverParts(b)];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] > y[i];
  return false;
}

Deno.test("CHANGELOG.md: Keep a Changelog, newest first, its newest version the one in deno.json", async () => {
  const changelog = await read("CHANGELOG.md");
  assert.match(changelog, /^# Changelog\n/);
  assert.match(changelog, /keepachangelog\.com\/en\/1\.1\.0/);
  const all = releases(changelog);
  assert.equal(all[0]?.version, "Unreleased", "[Unreleased] comes first");
  assert.equal(all[0].date, undefined, "[Unreleased] has no date");
  const versions = all.slice(1);
  assert.ok(versions.length >= 1, "at least one version");
  for (const release of all) {
    const odd = release.kinds.filter((kind) => !KINDS.includes(kind));
    assert.deepEqual(odd, [], `${release.version}: kinds of change are ${KINDS.join(", ")}`);
    assert.equal(
      new Set(release.kinds).size,
      release.kinds.length,
      `${release.version}: once each`,
    );
  }
  for (const [i, release] of versions.entries()) {
    assert.ok(release.entries > 0, `${release.version} says what changed`);
    assert.match(release.date ?? "", /^\d{4}-\d{2}-\d{2}$/, `${release.version} has a date`);
    assert.ok(!Number.isNaN(Date.parse(`${release.date}T00:00:00Z`)), `${release.date} is a date`);
    const older = versions[i + 1];
    if (older === undefined) continue;
    assert.ok(
      newerThan(release.version, older.version),
      `${release.version} after ${older.version}`,
    );
    assert.ok(
      release.date! >= older.date!,
      `${release.version}'s date is not before ${older.version}'s`,
    );
  }
  const { version } = JSON.parse(await read("deno.json"));
  assert.equal(versions[0].version, version, "the newest version is deno.json's");
});

Deno.test("the changelog reader refuses what Keep a Changelog does not allow", () => {
  assert.throws(() => releases("# Changelog\n\n## 1.0.0\n"), /release heading/);
  assert.deepEqual(releases("## [Unreleased]\n### Added\n- a\n- b\n## [1.0.0] - 2026-01-02\n"), [
    { version: "Unreleased", date: undefined, kinds: ["Added"], entries: 2 },
    { version: "1.0.0", date: "2026-01-02", kinds: [], entries: 0 },
  ]);
  assert.ok(newerThan("0.10.0", "0.9.1"));
  assert.ok(!newerThan("0.1.0", "0.1.0"));
});

// ---- .gitlab-ci.yml --------------------------------------------------------------------------

/** A job of .gitlab-ci.yml, as far as this test reads it. */
interface Job {
  stage: string;
  image: string | { name: string; entrypoint?: string[] };
  rules?: { if?: string; when?: string }[];
  needs?: string[];
  script: string[];
  parallel?: { matrix: Record<string, string[]>[] };
}

/**
 * GitLab's keywords at the top level (`image`, `services`, `cache` and the scripts are the old
 * global defaults): everything else is a job, and a job cannot take one of these names.
 */
const GLOBAL_KEYWORDS = new Set([
  "stages",
  "workflow",
  "variables",
  "default",
  "include",
  "image",
  "services",
  "cache",
  "before_script",
  "after_script",
]);

async function ciFile(): Promise<{ stages: string[]; jobs: Map<string, Job> }> {
  const parsed = parse(await read(".gitlab-ci.yml"), { uniqueKeys: true, strict: true });
  const jobs = new Map<string, Job>();
  for (const [name, value] of Object.entries(parsed)) {
    if (GLOBAL_KEYWORDS.has(name)) continue;
    jobs.set(name, value as Job);
  }
  return { stages: parsed.stages, jobs };
}

function imageName(job: Job): string {
  return typeof job.image === "string" ? job.image : job.image.name;
}

const onTagsOnly = (job: Job) =>
  job.rules?.length === 1 && job.rules[0].if === "$CI_COMMIT_TAG" &&
  job.rules[0].when === undefined;

/** The Deno version the repository pins: the Dockerfile's base image and .ci/run's install. */
async function pinnedDeno(): Promise<string> {
  const dockerfile = (await read("deploy/Dockerfile")).match(/^FROM denoland\/deno:(\S+)$/m)?.[1];
  const ciRun = (await read(".ci/run")).match(/^DENO_VERSION=(\S+)$/m)?.[1];
  assert.ok(dockerfile && ciRun, "the Dockerfile and .ci/run pin Deno");
  assert.equal(dockerfile, ciRun, "one Deno version");
  return dockerfile;
}

Deno.test(".gitlab-ci.yml: the gate on every pipeline; image and executables on a tag only", async () => {
  const { stages, jobs } = await ciFile();
  assert.deepEqual([...jobs.keys()].sort(), ["binaries", "container-image", "test", "version"]);
  for (const [name, job] of jobs) {
    assert.ok(stages.includes(job.stage), `${name}'s stage ${job.stage} is declared`);
    for (const need of job.needs ?? []) assert.ok(jobs.has(need), `${name} needs ${need}`);
  }

  const test = jobs.get("test")!;
  assert.equal(test.rules, undefined, "the gate runs on every pipeline, tags included");
  assert.deepEqual(test.script, ["bash .ci/run"]);
  await Deno.stat(join(ROOT, ".ci/run"));

  for (const name of ["version", "container-image", "binaries"]) {
    assert.ok(onTagsOnly(jobs.get(name)!), `${name} runs on tags only`);
  }
  for (const name of ["container-image", "binaries"]) {
    assert.deepEqual(jobs.get(name)!.needs, ["test", "version"], `${name} waits for the gate`);
  }

  const deno = await pinnedDeno();
  for (const name of ["version", "binaries"]) {
    assert.equal(imageName(jobs.get(name)!), `denoland/deno:${deno}`, `${name}: the pinned Deno`);
  }

  const image = jobs.get("container-image")!.script.join("\n");
  assert.match(
    image,
    /docker build -f deploy\/Dockerfile -t "\$CI_REGISTRY_IMAGE:\$CI_COMMIT_TAG" \.$/m,
  );
  assert.match(image, /docker push "\$CI_REGISTRY_IMAGE:\$CI_COMMIT_TAG"/);
  assert.match(image, /--password-stdin/, "the registry password never on a command line");
  await Deno.stat(join(ROOT, "deploy/Dockerfile"));
  assert.equal(jobs.get("container-image")!.stage, "release");
});

Deno.test(".gitlab-ci.yml: the executables are deno task compile's command, one per target", async () => {
  const binaries = (await ciFile()).jobs.get("binaries")!;
  const targets = binaries.parallel?.matrix[0].TARGET ?? [];
  assert.deepEqual(targets.toSorted(), [
    "aarch64-apple-darwin",
    "aarch64-unknown-linux-gnu",
    "x86_64-apple-darwin",
    "x86_64-pc-windows-msvc",
    "x86_64-unknown-linux-gnu",
  ]);
  const { tasks } = JSON.parse(await read("deno.json"));
  const compile = binaries.script.find((line) => line.startsWith("deno compile "));
  assert.ok(compile, "the job runs deno compile");
  // The task's flags with its --output replaced by the target and a file name per tag and target.
  const expected = tasks.compile.replace(
    "--output dist/gitlab-mcp-auth ",
    '--target "$TARGET" --output "dist/gitlab-mcp-auth-$CI_COMMIT_TAG-$TARGET" ',
  );
  assert.notEqual(expected, tasks.compile, "the compile task writes dist/gitlab-mcp-auth");
  assert.equal(compile, expected);
});

Deno.test(".gitlab-ci.yml: the version job accepts v<deno.json's version> with its changelog section, and nothing else", async (t) => {
  const script = (await ciFile()).jobs.get("version")!.script.join("\n");
  const { version } = JSON.parse(await read("deno.json"));
  const changelog = await read("CHANGELOG.md");
  const run = async (tag: string, files: { changelog?: string; denoJson?: string } = {}) => {
    const dir = await Deno.makeTempDir();
    try {
      await Deno.writeTextFile(join(dir, "CHANGELOG.md"), files.changelog ?? changelog);
      await Deno.writeTextFile(
        join(dir, "deno.json"),
        files.denoJson ?? JSON.stringify({ version }),
      );
      const out = await new Deno.Command("bash", {
        args: ["-eo", "pipefail", "-c", script],
        cwd: dir,
        env: { CI_COMMIT_TAG: tag, PATH: `${dirname(Deno.execPath())}:${Deno.env.get("PATH")}` },
        stdout: "piped",
        stderr: "piped",
      }).output();
      return {
        code: out.code,
        text: new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr),
      };
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  };
  await t.step(`v${version}: accepted`, async () => {
    const { code, text } = await run(`v${version}`);
    assert.equal(code, 0, text);
  });
  await t.step("another version: refused, naming deno.json's", async () => {
    const { code, text } = await run("v99.0.0");
    assert.notEqual(code, 0);
    assert.match(text, new RegExp(`not v${version.replaceAll(".", "\\.")}`));
  });
  await t.step("the version without its v: refused", async () => {
    assert.notEqual((await run(version)).code, 0);
  });
  await t.step("a version the changelog has no section for: refused", async () => {
    const { code, text } = await run("v9.9.9", { denoJson: JSON.stringify({ version: "9.9.9" }) });
    assert.notEqual(code, 0);
    assert.match(text, /CHANGELOG\.md has no section for 9\.9\.9/);
  });
});
