/**
 * The bench's report writer (bench/report.ts `writeReadme`, also used by bench/poll_economy.ts)
 * changes bench/README.md between its own markers and nothing else: 5933967 once spliced bench
 * numbers into the middle of README.md. Every case runs on copies of the project's README.md,
 * bench/README.md and deno.json in a temporary folder laid out like the project.
 */

import assert from "node:assert/strict";
import { dirname, join, resolve } from "node:path";
import { writeReadme } from "../bench/report.ts";

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), "..");
const COPIED = ["README.md", "bench/README.md", "deno.json"];

/** A results table as the bench writes it: unaligned, for `deno fmt` to align. */
const TABLE = [
  "Measured in a test.",
  "",
  "| case | req/s | note |",
  "|---|---:|---|",
  "| refresh | 1,234 | written by bench_report_test |",
  "| floor-jwt-kv | 56 | x |",
].join("\n");

/** A temporary copy of the project's markdown and deno.json; `run` gets its root. */
async function withCopy(run: (root: string) => Promise<void>): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "bench_report_test_" });
  try {
    await Deno.mkdir(join(root, "bench"));
    for (const file of COPIED) await Deno.copyFile(join(ROOT, file), join(root, file));
    await run(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

/** Every file under `root` with its bytes. */
async function snapshot(root: string, under = ""): Promise<Map<string, Uint8Array>> {
  const files = new Map<string, Uint8Array>();
  for await (const entry of Deno.readDir(join(root, under))) {
    const path = under ? `${under}/${entry.name}` : entry.name;
    if (entry.isDirectory) {
      for (const [p, bytes] of await snapshot(root, path)) files.set(p, bytes);
    } else files.set(path, await Deno.readFile(join(root, path)));
  }
  return files;
}

/** The text before `<!-- name:start -->` (included) and after `<!-- name:end -->` (included). */
function outside(text: string, name: string): { before: string; after: string } {
  const start = text.indexOf(`<!-- ${name}:start -->`), end = text.indexOf(`<!-- ${name}:end -->`);
  assert.ok(start >= 0 && end > start, `${name} markers`);
  return { before: text.slice(0, start + `<!-- ${name}:start -->`.length), after: text.slice(end) };
}

async function assertFormatted(root: string, file: string): Promise<void> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["fmt", "--check", `--config=${root}/deno.json`, file],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, `deno fmt --check ${file}: ${new TextDecoder().decode(out.stderr)}`);
}

for (const name of ["results", "poll-economy"]) {
  Deno.test(`writeReadme (${name}): README.md untouched, bench/README.md only between the markers`, async () => {
    await withCopy(async (root) => {
      const before = await snapshot(root);
      const benchReadme = join(root, "bench/README.md");
      const old = await Deno.readTextFile(benchReadme);

      await writeReadme(benchReadme, TABLE, root, name);

      const after = await snapshot(root);
      assert.deepEqual([...after.keys()].sort(), [...before.keys()].sort(), "no file added");
      assert.deepEqual(after.get("README.md"), before.get("README.md"), "README.md byte-identical");
      assert.deepEqual(after.get("deno.json"), before.get("deno.json"));
      const written = await Deno.readTextFile(benchReadme);
      assert.notEqual(written, old);
      assert.deepEqual(outside(written, name), outside(old, name), "outside the markers");
      const inside = written.slice(
        outside(written, name).before.length,
        -outside(written, name).after.length,
      );
      assert.match(inside, /\| refresh +\| +1,234 \| written by bench_report_test \|/);
      assert.doesNotMatch(inside, /Measured \d{4}-/, "the previous table is gone");
      await assertFormatted(root, "bench/README.md");

      // Writing the same table again changes nothing.
      await writeReadme(benchReadme, TABLE, root, name);
      assert.equal(await Deno.readTextFile(benchReadme), written);
    });
  });
}

Deno.test("writeReadme refuses any file but bench/README.md", async (t) => {
  await withCopy(async (root) => {
    const before = await snapshot(root);
    const refused = async (path: string, why: RegExp) => {
      await assert.rejects(writeReadme(path, TABLE, root, "results"), why);
      await assert.rejects(writeReadme(path, TABLE, root, "bench"), why);
      assert.deepEqual(await snapshot(root), before, `nothing changed after ${path}`);
    };
    await t.step("README.md", () => refused(join(root, "README.md"), /writes only into/));
    await t.step(
      "README.md through ..",
      () => refused(join(root, "bench/../README.md"), /writes only into/),
    );
    await t.step(
      "README.md with a ./ segment",
      () => refused(`${root}/./README.md`, /writes only into/),
    );
    await t.step("another project's bench/README.md", async () => {
      await withCopy(async (other) => {
        const theirs = await snapshot(other);
        await refused(join(other, "bench/README.md"), /writes only into/);
        assert.deepEqual(await snapshot(other), theirs);
      });
    });
    await t.step(
      "a missing file",
      () => refused(join(root, "bench/OTHER.md"), /cannot be resolved/),
    );
    await t.step("a bench/README.md that is a link to README.md", async () => {
      const link = await Deno.makeTempDir({ prefix: "bench_report_link_" });
      try {
        await Deno.mkdir(join(link, "bench"));
        await Deno.copyFile(join(root, "README.md"), join(link, "README.md"));
        await Deno.copyFile(join(root, "deno.json"), join(link, "deno.json"));
        await Deno.symlink("../README.md", join(link, "bench/README.md"));
        const readme = await Deno.readFile(join(link, "README.md"));
        await assert.rejects(
          writeReadme(join(link, "bench/README.md"), TABLE, link, "gateway"),
          /writes only into/,
        );
        assert.deepEqual(await Deno.readFile(join(link, "README.md")), readme);
      } finally {
        await Deno.remove(link, { recursive: true });
      }
    });
  });
});

Deno.test("writeReadme refuses missing or unbalanced markers", async (t) => {
  const cases: [string, string, RegExp][] = [
    ["no markers", "# Benchmarks\n\nText.\n", /found 0 start and 0 end/],
    ["a start only", "# B\n\n<!-- results:start -->\n\nold\n", /found 1 start and 0 end/],
    ["an end only", "# B\n\nold\n\n<!-- results:end -->\n", /found 0 start and 1 end/],
    ["end before start", "# B\n\n<!-- results:end -->\n\n<!-- results:start -->\n", /wrong order/],
    [
      "two pairs",
      "<!-- results:start -->\n\na\n\n<!-- results:end -->\n\n<!-- results:start -->\n\nb\n\n<!-- results:end -->\n",
      /found 2 start and 2 end/,
    ],
    [
      "another pair inside",
      "<!-- results:start -->\n\n<!-- poll-economy:start -->\n\nx\n\n<!-- poll-economy:end -->\n\n<!-- results:end -->\n",
      /another marker/,
    ],
    [
      "a file fmt would change outside",
      "#   B\n\n<!-- results:start -->\n\n<!-- results:end -->\n",
      /run deno fmt/,
    ],
  ];
  for (const [label, text, why] of cases) {
    await t.step(label, async () => {
      await withCopy(async (root) => {
        const benchReadme = join(root, "bench/README.md");
        await Deno.writeTextFile(benchReadme, text);
        const before = await snapshot(root);
        await assert.rejects(writeReadme(benchReadme, TABLE, root, "results"), why);
        assert.deepEqual(await snapshot(root), before);
      });
    });
  }
  await t.step("a table holding a marker", async () => {
    await withCopy(async (root) => {
      const before = await snapshot(root);
      await assert.rejects(
        writeReadme(join(root, "bench/README.md"), `x\n<!-- results:end -->\n`, root),
        /holds a marker/,
      );
      assert.deepEqual(await snapshot(root), before);
    });
  });
});
