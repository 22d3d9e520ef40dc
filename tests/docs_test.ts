/**
 * The project's markdown holds together: every internal link (`#anchor`, a relative path, a
 * path with an anchor into another markdown file) has a target, every section and page the
 * README's table of contents names exists, the README stays a landing page (at most 400 lines,
 * naming every page of docs/), and every `<!-- name:start -->` marker has its
 * `<!-- name:end -->`; no link leaves the repository (it would be dead on a clone without
 * what lies beside it). Covers README.md, bench/README.md and every markdown file under docs/,
 * deploy/ and dev/. Links to http(s) URLs are not checked (no network in tests).
 *
 * Anchors follow GitHub's rules (github-slugger): the heading's text, lowercased, without
 * punctuation except `-` and `_`, spaces turned into `-`; a repeated heading gets `-1`, `-2`, ….
 */

import assert from "node:assert/strict";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), "..");

/** The markdown files this test covers, relative to the project root. */
async function markdownFiles(): Promise<string[]> {
  const files = ["README.md", "CHANGELOG.md", "bench/README.md"];
  for (const folder of ["deploy", "dev", "docs"]) files.push(...await markdownUnder(folder));
  return files;
}

async function markdownUnder(folder: string): Promise<string[]> {
  const found: string[] = [];
  for await (const entry of Deno.readDir(join(ROOT, folder))) {
    const path = `${folder}/${entry.name}`;
    if (entry.isDirectory) found.push(...await markdownUnder(path));
    else if (entry.isFile && entry.name.toLowerCase().endsWith(".md")) found.push(path);
  }
  return found.sort();
}

// ---- reading markdown ------------------------------------------------------------------------

/** `text` with the lines of fenced code blocks blanked (line numbers are kept). */
export function withoutFences(text: string): string {
  const lines = text.split("\n");
  let fence: string | undefined;
  return lines.map((line) => {
    const opening = line.match(/^ {0,3}(`{3,}|~{3,})/);
    if (fence === undefined) {
      if (!opening) return line;
      fence = opening[1];
      return "";
    }
    if (new RegExp(`^ {0,3}${fence[0]}{${fence.length},}\\s*$`).test(line)) fence = undefined;
    return "";
  }).join("\n");
}

/** Inline code spans (`` `x` ``, ``` `` x `` ```) matched as CommonMark pairs them. */
const CODE_SPAN = /(?<!`)(`+)(?!`)([\s\S]*?[^`])\1(?!`)/g;

/** `text` with fenced code blocks and inline code spans blanked (line numbers are kept). */
function withoutCode(text: string): string {
  return withoutFences(text).replace(CODE_SPAN, (span) => span.replace(/[^\n]/g, "x"));
}

/** The text a heading line shows, as GitHub renders it before making the anchor. */
function headingText(raw: string): string {
  const parts = raw.split(CODE_SPAN);
  // split() with two groups gives [text, ticks, code, text, ticks, code, …, text].
  let out = "";
  for (let i = 0; i < parts.length; i += 3) {
    out += parts[i]
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1") // links and images: their text
      .replace(/<[^>]+>/g, "") // inline HTML
      .replace(/(\*{1,3})(\S[\s\S]*?)\1/g, "$2") // *emphasis*
      .replace(/(^|[^\p{L}\p{N}])_{1,3}(\S[\s\S]*?)_{1,3}(?=[^\p{L}\p{N}]|$)/gu, "$1$2");
    if (i + 2 < parts.length) out += parts[i + 2];
  }
  return out.trim();
}

/** GitHub's slug of one heading text, before making it unique. */
export function slug(text: string): string {
  return text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "").replace(/ /g, "-");
}

/** The anchors of a markdown file: its headings' slugs (made unique) and explicit HTML ids. */
export function anchors(text: string): Set<string> {
  const found = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of withoutFences(text).split("\n")) {
    const heading = line.match(/^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/);
    if (heading) {
      const base = slug(headingText(heading[1] ?? ""));
      let unique = base;
      while (seen.has(unique)) {
        const n = (seen.get(base) ?? 0) + 1;
        seen.set(base, n);
        unique = `${base}-${n}`;
      }
      seen.set(unique, 0);
      found.add(unique);
    }
    for (const html of line.matchAll(/<a\s[^>]*\b(?:id|name)="([^"]+)"/g)) found.add(html[1]);
  }
  return found;
}

/** One link of a markdown file: where it points and the line it is on. */
interface Link {
  target: string;
  line: number;
}

/** The links of a markdown file, outside code and HTML comments. */
export function links(text: string): Link[] {
  const prose = withoutCode(text)
    .replace(/<!--[\s\S]*?-->/g, (comment) => comment.replace(/[^\n]/g, " "));
  const lineOf = (index: number) => prose.slice(0, index).split("\n").length;
  const found: Link[] = [];
  // Inline links and images: [text](target "title"), target optionally in <>.
  for (const m of prose.matchAll(/\]\(\s*(<[^>\n]*>|[^\s)]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g)) {
    found.push({ target: m[1].replace(/^<|>$/g, ""), line: lineOf(m.index) });
  }
  // Reference definitions: [label]: target
  for (const m of prose.matchAll(/^ {0,3}\[[^\]]+\]:\s*(\S+)/gm)) {
    found.push({ target: m[1].replace(/^<|>$/g, ""), line: lineOf(m.index) });
  }
  for (const m of prose.matchAll(/<(?:a|img)\s[^>]*\b(?:href|src)="([^"]+)"/g)) {
    found.push({ target: m[1], line: lineOf(m.index) });
  }
  return found;
}

/** Why `link` of the markdown file `file` (relative to the root) leads nowhere, or undefined. */
async function brokenLink(file: string, text: string, link: Link): Promise<string | undefined> {
  const { target } = link;
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // http(s), mailto, …: not checked
  const hash = target.indexOf("#");
  const pathPart = decodeURIComponent((hash < 0 ? target : target.slice(0, hash)).split("?")[0]);
  const fragment = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
  let targetText = text;
  let targetName = file;
  if (pathPart !== "") {
    const path = pathPart.startsWith("/")
      ? join(ROOT, pathPart)
      : resolve(ROOT, dirname(file), pathPart);
    // The repository stands alone: a link that leaves it is dead on a clone and on a forge.
    if (relative(ROOT, path).startsWith("..")) return `a link out of the repository: ${target}`;
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(path);
    } catch {
      return `no file ${relative(ROOT, path)}`;
    }
    if (fragment === undefined || fragment === "") return undefined;
    if (!info.isFile || !path.toLowerCase().endsWith(".md")) {
      return `an anchor into ${relative(ROOT, path)}, which is not a markdown file`;
    }
    targetText = await Deno.readTextFile(path);
    targetName = relative(ROOT, path);
  }
  if (fragment === undefined) return undefined;
  if (fragment === "") return "an empty anchor";
  return anchors(targetText).has(fragment) ? undefined : `no heading #${fragment} in ${targetName}`;
}

/** What is wrong with the `<!-- name:start -->` / `<!-- name:end -->` markers of a file. */
export function markerProblems(text: string): string[] {
  const problems: string[] = [];
  const open: { name: string; line: number }[] = [];
  const used = new Set<string>();
  const lines = withoutCode(text).split("\n");
  lines.forEach((line, i) => {
    for (const m of line.matchAll(/<!--\s*([\w.-]+):(start|end)\s*-->/g)) {
      const [, name, kind] = m;
      if (kind === "start") {
        if (used.has(name)) problems.push(`line ${i + 1}: a second ${name}:start`);
        used.add(name);
        open.push({ name, line: i + 1 });
        continue;
      }
      const top = open.at(-1);
      if (top === undefined) problems.push(`line ${i + 1}: ${name}:end without a start`);
      else if (top.name !== name) {
        problems.push(
          `line ${i + 1}: ${name}:end while ${top.name}:start (line ${top.line}) is open`,
        );
      } else open.pop();
    }
  });
  for (const { name, line } of open) problems.push(`line ${line}: ${name}:start without an end`);
  return problems;
}

/**
 * The links of the README's table of contents: the bullet list of links between the title and
 * the first section (`#anchor`s of the README and pages of docs/).
 */
export function tableOfContents(readme: string): Link[] {
  const head = withoutFences(readme).split(/^## /m)[0];
  const lines = head.split("\n");
  const start = lines.findIndex((line) => /^- .*\]\(/.test(line));
  if (start < 0) return [];
  let end = start;
  while (end + 1 < lines.length && /^(- |\s+)\S/.test(lines[end + 1])) end++;
  const list = lines.slice(start, end + 1).join("\n");
  return links(list).map((link) => ({ ...link, line: link.line + start }));
}

/** The README's longest allowed length: a landing page, the rest lives in docs/. */
const README_MAX_LINES = 400;

// ---- the tests -------------------------------------------------------------------------------

Deno.test("the GitHub slugger", () => {
  assert.equal(slug(headingText("Operator's CLI")), "operators-cli");
  assert.equal(
    slug(headingText("Where the spec is silent: what we chose")),
    "where-the-spec-is-silent-what-we-chose",
  );
  assert.equal(slug(headingText("Rotating `JWT_SECRET`")), "rotating-jwt_secret");
  assert.equal(slug(headingText("Resource indicators (RFC 8707)")), "resource-indicators-rfc-8707");
  assert.equal(
    slug(headingText('Targets of "Fast where MCP traffic flows" (issue 15), as measured')),
    "targets-of-fast-where-mcp-traffic-flows-issue-15-as-measured",
  );
  assert.equal(slug(headingText("A [link](x.md) and **bold** _it_")), "a-link-and-bold-it");
  assert.deepEqual(
    [...anchors("# A\n## A\n```\n# A\n```\n### A\n## A-1\n")],
    ["a", "a-1", "a-2", "a-1-1"],
  );
});

Deno.test("the link and marker readers", () => {
  const text = [
    "[a](#x) `[b](#code)` ![c](img.png 'title')",
    "```",
    "[d](#fenced)",
    "```",
    "<!-- [e](#comment) -->",
    "[ref]: ../f.md#g",
  ].join("\n");
  assert.deepEqual(links(text).map((link) => link.target), ["#x", "img.png", "../f.md#g"]);
  assert.deepEqual(markerProblems("<!-- a:start -->\n<!-- b:start -->\n<!-- b:end -->\n"), [
    "line 1: a:start without an end",
  ]);
  assert.equal(markerProblems("<!-- a:end -->").length, 1);
  assert.deepEqual(markerProblems("`<!-- a:start -->` is written about, not a marker"), []);
  assert.equal(
    markerProblems("<!-- a:start --><!-- b:start --><!-- a:end --><!-- b:end -->")
      .length,
    2,
  );
  assert.deepEqual(
    markerProblems("<!-- a:start -->\n<!-- a:end -->\n<!-- b:start -->x<!-- b:end -->"),
    [],
  );
});

Deno.test("markdown files: every internal link has a target", async (t) => {
  for (const file of await markdownFiles()) {
    await t.step(file, async () => {
      const text = await Deno.readTextFile(join(ROOT, file));
      const broken: string[] = [];
      for (const link of links(text)) {
        const why = await brokenLink(file, text, link);
        if (why) broken.push(`${file}:${link.line}: (${link.target}) ${why}`);
      }
      assert.deepEqual(broken, [], `broken links:\n${broken.join("\n")}`);
    });
  }
});

Deno.test("markdown files: every start marker has its end marker", async (t) => {
  for (const file of await markdownFiles()) {
    await t.step(file, async () => {
      const problems = markerProblems(await Deno.readTextFile(join(ROOT, file)));
      assert.deepEqual(problems, [], `${file}:\n${problems.join("\n")}`);
    });
  }
});

Deno.test("the link checker: an anchor into another markdown file must be one of its headings", async () => {
  const at = (target: string) => brokenLink("README.md", "# Here\n", { target, line: 1 });
  assert.equal(await at("docs/configuration.md#configuration"), undefined);
  assert.equal(
    await at("docs/configuration.md#no-such-heading"),
    "no heading #no-such-heading in docs/configuration.md",
  );
  assert.equal(await at("#here"), undefined);
  assert.equal(await at("#nowhere"), "no heading #nowhere in README.md");
  assert.equal(await at("docs/no-such-page.md"), "no file docs/no-such-page.md");
  assert.equal(await at("../outside.md"), "a link out of the repository: ../outside.md");
  assert.equal(
    await brokenLink("docs/security.md", "", { target: "operating.md#metrics", line: 1 }),
    undefined,
    "relative to the linking file's folder",
  );
});

Deno.test("README: every section and page its table of contents names exists", async () => {
  const readme = await Deno.readTextFile(join(ROOT, "README.md"));
  const contents = tableOfContents(readme);
  assert.ok(contents.length >= 5, `a table of contents near the top: ${JSON.stringify(contents)}`);
  const missing: string[] = [];
  for (const link of contents) {
    const why = await brokenLink("README.md", readme, link);
    if (why) missing.push(`${link.target}: ${why}`);
  }
  assert.deepEqual(missing, [], "sections and pages the contents name");
});

Deno.test("README: its table of contents names every page of docs/", async () => {
  const readme = await Deno.readTextFile(join(ROOT, "README.md"));
  const named = new Set(
    tableOfContents(readme).map((link) => link.target.split("#")[0]).filter((path) => path !== ""),
  );
  const pages = (await markdownUnder("docs")).filter((page) => !named.has(page));
  assert.deepEqual(pages, [], "pages of docs/ the README's contents do not name");
});

Deno.test(`README: a landing page of at most ${README_MAX_LINES} lines`, async () => {
  const readme = await Deno.readTextFile(join(ROOT, "README.md"));
  const lines = readme.split("\n").length - (readme.endsWith("\n") ? 1 : 0);
  assert.ok(lines <= README_MAX_LINES, `README.md has ${lines} lines: move a section to docs/`);
});

Deno.test("README: opens with the demo and the test command", async () => {
  const readme = await Deno.readTextFile(join(ROOT, "README.md"));
  const first = readme.match(/^```sh\n([\s\S]*?)\n```/m);
  assert.ok(first, "a first sh block");
  assert.ok(readme.indexOf(first[0]) < readme.search(/^## /m), "before the first section");
  const commands = first[1].split("\n").map((line) => line.replace(/\s+#.*$/, "").trim());
  assert.deepEqual(commands, ["npx -y deno@2.9.6 task demo", "npx -y deno@2.9.6 task test"]);
});
