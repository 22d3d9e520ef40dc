/**
 * The house stays in layers: what `src/` imports is read from the code itself (relative
 * `import`/`export … from` specifiers, type-only ones included) and held to the rules
 * docs/development.md's "Code layout" states. Floors, from the ground up: the HTTP toolkit and
 * the loose files at `src/`'s root; the store and configuration kits; the domain wings; the top
 * floor that composes the service (`src/app/`, with the operator's CLI, which is another way
 * in). An import from a lower floor to a higher one is a sign that something lives on the wrong
 * floor.
 */

import assert from "node:assert/strict";
import { dirname, join, normalize, relative, resolve } from "node:path";

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), "..");

/** The floor of each folder of `src/` (the root's loose files are `.`). */
const FLOORS: Readonly<Record<string, number>> = {
  ".": 0,
  http: 0,
  store: 1,
  config: 1,
  app: 3,
  admin: 3,
};
/** Every other folder is a domain wing. */
const WING_FLOOR = 2;

/** At most this many imports may run from a lower floor to a higher one (issue 34; none today). */
const MAX_UPWARD_IMPORTS = 4;
const MAX_FILE_LINES = 400;
const MAX_LOOSE_FILES = 8;

interface SourceFile {
  path: string;
  lines: number;
  imports: string[];
}

const SPECIFIER =
  /(?:^|\n)\s*(?:import|export)\b[^;"'`]*?\bfrom\s*["'](\.\.?\/[^"']+)["']|\bimport\s*\(\s*["'](\.\.?\/[^"']+)["']/g;

async function sourceFiles(): Promise<SourceFile[]> {
  const files: SourceFile[] = [];
  async function walk(folder: string): Promise<void> {
    for await (const entry of Deno.readDir(join(ROOT, folder))) {
      const path = `${folder}/${entry.name}`;
      if (entry.isDirectory) await walk(path);
      else if (entry.isFile && entry.name.endsWith(".ts")) {
        const text = await Deno.readTextFile(join(ROOT, path));
        const imports = [...text.matchAll(SPECIFIER)]
          .map((match) => normalize(join(dirname(path), match[1] ?? match[2])))
          .filter((target) => target.startsWith("src/") && target.endsWith(".ts"));
        files.push({ path, lines: text.split("\n").length - 1, imports });
      }
    }
  }
  await walk("src");
  return files.sort((a, b) => a.path.localeCompare(b.path));
}

/** `src/a/b.ts` → `a`; `src/b.ts` → `.`. */
function folderOf(path: string): string {
  const parts = path.split("/");
  return parts.length > 2 ? parts[1] : ".";
}

function floorOf(path: string): number {
  return FLOORS[folderOf(path)] ?? WING_FLOOR;
}

/** The import circles between files (strongly connected components of more than one file). */
function circles(files: SourceFile[]): string[][] {
  const edges = new Map(files.map((file) => [file.path, file.imports]));
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const visit = (node: string): void => {
    index.set(node, next);
    low.set(node, next++);
    stack.push(node);
    onStack.add(node);
    for (const target of edges.get(node) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(node, Math.min(low.get(node) ?? 0, low.get(target) ?? 0));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node) ?? 0, index.get(target) ?? 0));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string | undefined;
    do {
      member = stack.pop();
      if (member === undefined) break;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1) found.push(component.sort());
  };
  for (const file of files) if (!index.has(file.path)) visit(file.path);
  return found;
}

Deno.test("architecture: no import circle between the files of src/", async () => {
  assert.deepEqual(circles(await sourceFiles()), []);
});

/** The folders of src/ as one node each, importing the folders their files import. */
function folderGraph(files: SourceFile[]): SourceFile[] {
  const imports = new Map<string, Set<string>>();
  for (const file of files) {
    const from = folderOf(file.path);
    const targets = imports.get(from) ?? new Set();
    for (const target of file.imports) {
      if (folderOf(target) !== from) targets.add(folderOf(target));
    }
    imports.set(from, targets);
  }
  return [...imports].map(([path, targets]) => ({ path, lines: 0, imports: [...targets] }));
}

Deno.test("architecture: no two folders of src/ import each other, even through others", async () => {
  assert.deepEqual(circles(folderGraph(await sourceFiles())), []);
});

Deno.test("architecture: src/http/ is a toolkit and imports nothing outside itself", async () => {
  const outside = (await sourceFiles()).filter((file) => folderOf(file.path) === "http")
    .flatMap((file) =>
      file.imports.filter((target) => folderOf(target) !== "http").map((target) =>
        `${file.path} -> ${target}`
      )
    );
  assert.deepEqual(outside, []);
});

Deno.test(`architecture: at most ${MAX_UPWARD_IMPORTS} imports run up the floors`, async () => {
  const upward = (await sourceFiles()).flatMap((file) =>
    file.imports.filter((target) => floorOf(target) > floorOf(file.path)).map((target) =>
      `${file.path} -> ${target}`
    )
  );
  assert.ok(upward.length <= MAX_UPWARD_IMPORTS, `${upward.length}:\n${upward.join("\n")}`);
});

Deno.test(`architecture: no file of src/ over ${MAX_FILE_LINES} lines`, async () => {
  const long = (await sourceFiles()).filter((file) => file.lines > MAX_FILE_LINES)
    .map((file) => `${file.path} (${file.lines})`);
  assert.deepEqual(long, []);
});

Deno.test(`architecture: at most ${MAX_LOOSE_FILES} loose files at src/'s root`, async () => {
  const loose = (await sourceFiles()).filter((file) => folderOf(file.path) === ".");
  assert.ok(loose.length <= MAX_LOOSE_FILES, loose.map((file) => file.path).join(", "));
});

Deno.test("architecture: docs/development.md's Code layout names every folder of src/, and only those", async () => {
  const readme = await Deno.readTextFile(join(ROOT, "docs/development.md"));
  const start = readme.indexOf("### Code layout");
  assert.ok(start >= 0, "docs/development.md has a Code layout section");
  const end = readme.indexOf("\n#", start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  const named = new Set(
    [...section.matchAll(/`(src\/[a-z_]+(?:\/[a-z_]+)*)\/`/g)].map((match) => match[1]),
  );
  const folders: string[] = [];
  for await (const entry of Deno.readDir(join(ROOT, "src"))) {
    if (entry.isDirectory) folders.push(`src/${entry.name}`);
  }
  const missing = [...named].filter((folder) => {
    try {
      return !Deno.statSync(join(ROOT, folder)).isDirectory;
    } catch {
      return true;
    }
  });
  assert.deepEqual(missing, [], "folders docs/development.md names that do not exist");
  assert.deepEqual(folders.filter((folder) => !named.has(folder)).sort(), [], "unnamed folders");
  assert.equal(relative(ROOT, join(ROOT, "src")), "src");
});
