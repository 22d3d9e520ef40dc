/** Reading the README's sections and shell blocks, for the tests that run what it prints. */

import assert from "node:assert/strict";

export const README = new URL("../README.md", import.meta.url);

/** The markdown of the section under `## heading`, up to the next `## `. */
export async function readmeSection(heading: string): Promise<string> {
  const text = await Deno.readTextFile(README);
  const start = text.indexOf(`\n## ${heading}\n`);
  assert.ok(start >= 0, `README has a section "${heading}"`);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

/** The lines of each ```sh block of `markdown`, without their indentation. */
export function shellBlocks(markdown: string): string[][] {
  return [...markdown.matchAll(/^( *)```sh\n([\s\S]*?)^\1```$/gm)].map(([, indent, body]) =>
    body.split("\n").filter((line) => line.trim() !== "").map((line) => line.slice(indent.length))
  );
}
