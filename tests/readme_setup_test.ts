/**
 * What the README tells a first-time operator to type works as typed: "Run it with GitLab"
 * step 2 creates the KV file's folder before the service needs it, and its settings make a
 * complete configuration.
 */

import assert from "node:assert/strict";
import { dirname } from "node:path";
import { loadConfig, oauthSettings } from "../src/config/mod.ts";
import { TEST_SECRET } from "./_helpers.ts";

const README = new URL("../README.md", import.meta.url);

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

/** The commands of a shell block, comments stripped. */
function commands(lines: string[]): string[] {
  return lines.map((line) => line.replace(/\s+#.*$/, "").trim());
}

/** `export NAME=value` lines, in order; a `$(…)` value becomes `substitute`. */
function exported(lines: string[], substitute: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const command of commands(lines)) {
    const match = command.match(/^export ([A-Z][A-Z0-9_]*)=(.*)$/);
    if (!match) continue;
    const value = match[2].replace(/^"(.*)"$/, "$1");
    env[match[1]] = value.startsWith("$(") ? substitute : value;
  }
  return env;
}

/** Step 2's block: the one that starts the service. */
async function startBlock(): Promise<string[]> {
  const blocks = shellBlocks(await readmeSection("Run it with GitLab"));
  const block = blocks.find((lines) => lines.some((line) => line.includes("task start")));
  assert.ok(block, "Run it with GitLab has a block that starts the service");
  return block;
}

Deno.test("README Run it with GitLab: the KV file's folder is created before the service starts", async () => {
  const block = await startBlock();
  const kvPath = exported(block, TEST_SECRET).KV_PATH;
  assert.ok(kvPath?.startsWith("/"), "step 2 sets an absolute KV_PATH");
  const folder = dirname(kvPath);
  const run = commands(block);
  const creates = run.findIndex((command) =>
    /^(sudo )?(install -d|mkdir -p)\b/.test(command) && command.split(/\s+/).includes(folder)
  );
  assert.ok(creates >= 0, `step 2 creates ${folder}`);
  assert.ok(creates < run.findIndex((command) => command.includes("task start")));
});

Deno.test("README Run it with GitLab: step 2's settings make a production service with its MCP server at /mcp", async () => {
  const env = exported(await startBlock(), TEST_SECRET);
  const config = loadConfig({ ...env, GITLAB_CLIENT_ID: "app-id" });
  assert.ok(oauthSettings(config), "OAuth is configured");
  assert.equal(config.securityProfile, "strict");
  assert.ok(config.mcpUpstreamUrl, "MCP_UPSTREAM_URL is set: the gateway serves /mcp");
  const step3 = (await readmeSection("Run it with GitLab")).split(/^3\. /m)[1] ?? "";
  assert.ok(step3.includes(`${config.baseUrl}/mcp`), "step 3 connects clients to {BASE_URL}/mcp");
});
