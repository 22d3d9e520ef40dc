/**
 * Reading the sections and shell blocks of the README and the pages of docs/, for the tests that
 * run what they print.
 */

import assert from "node:assert/strict";

export const README = new URL("../README.md", import.meta.url);

/** A page of docs/ (`"operating.md"`, `"configuration.md"`, …). */
export function docsPage(name: string): URL {
  return new URL(`../docs/${name}`, import.meta.url);
}

/** The markdown of the section under `## heading` of `page`, up to the next `## `. */
export async function readmeSection(heading: string, page: URL = README): Promise<string> {
  const text = await Deno.readTextFile(page);
  const start = text.indexOf(`\n## ${heading}\n`);
  assert.ok(
    start >= 0,
    `${page.pathname.split("/").slice(-2).join("/")} has a section "${heading}"`,
  );
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

/** The lines of each ```sh block of `markdown`, without their indentation. */
export function shellBlocks(markdown: string): string[][] {
  return [...markdown.matchAll(/^( *)```sh\n([\s\S]*?)^\1```$/gm)].map(([, indent, body]) =>
    body.split("\n").filter((line) => line.trim() !== "").map((line) => line.slice(indent.length))
  );
}
