/**
 * Every code block in the docs (README.md, bench/README.md, docs/) either runs as printed, or
 * says what to change (issue 33 §2.8). Each block is listed below by its file and first line,
 * with how it is proven: a new block fails this test until it is listed.
 *
 * - `tasks`: `deno task` lines name tasks deno.json has, and scripts named exist;
 * - `file`: the block is the code of a file another test runs (after its header comment);
 * - `runs`: a test extracts the block from its section and runs it (it names the section);
 * - `config`: the service's configuration loader accepts it (env lines, a policy or servers
 *   file written out as printed);
 * - `not run`: the docs say so beside the block, and what to change.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";
import { TEST_SECRET } from "./_helpers.ts";

const ROOT = new URL("../", import.meta.url);
const DOCS = ["README.md", "bench/README.md", ...docsFolder()];

function docsFolder(): string[] {
  return [...Deno.readDirSync(new URL("docs/", ROOT))]
    .filter((entry) => entry.name.endsWith(".md"))
    .map((entry) => `docs/${entry.name}`);
}

/** A fenced block: its file, language, first line, text and the prose around it. */
interface Block {
  file: string;
  lang: string;
  first: string;
  text: string;
  /** The lines before the block, up to the previous block or heading. */
  before: string;
  /** The paragraph after the block. */
  after: string;
}

function blocksOf(file: string, markdown: string): Block[] {
  const blocks: Block[] = [];
  const lines = markdown.split("\n");
  let proseStart = 0;
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i].match(/^( *)```(\w+)\s*$/);
    if (!open) continue;
    const indent = open[1].length;
    const end = lines.findIndex((line, j) => j > i && line.trim() === "```");
    assert.ok(end > i, `${file}:${i + 1}: an unclosed block`);
    const body = lines.slice(i + 1, end).map((line) => line.slice(indent));
    const nextBlank = lines.findIndex((line, j) => j > end + 1 && line.trim() === "");
    blocks.push({
      file,
      lang: open[2],
      first: body[0].trim(),
      text: body.join("\n"),
      before: lines.slice(proseStart, i).join("\n"),
      after: lines.slice(end + 1, nextBlank < 0 ? undefined : nextBlank).join("\n"),
    });
    proseStart = end + 1;
    i = end;
  }
  return blocks;
}

type Proof =
  | { kind: "tasks" }
  | { kind: "file"; path: string; runBy: string }
  | { kind: "runs"; section: string; runBy: string }
  | { kind: "config"; as: "env" | "policy" | "servers"; env?: Record<string, string> }
  | { kind: "not run"; says: RegExp };

/** How each block is proven, by `file` and the start of its first line. */
const PROOFS: [string, string, Proof][] = [
  ["README.md", "npx -y deno@2.9.6 task demo", { kind: "tasks" }],
  ["README.md", "npx @modelcontextprotocol/inspector", {
    kind: "not run",
    says: /the four commands\s+above are not run by the tests/,
  }],
  ["README.md", "export GITLAB_CLIENT_ID=<application id>", {
    kind: "runs",
    section: "Run it with GitLab",
    runBy: "tests/readme_setup_test.ts",
  }],
  ["docs/operating.md", "npx -y deno@2.9.6 task sim-gitlab", {
    kind: "runs",
    section: "Rehearse the production setup without GitLab",
    runBy: "tests/rehearsal_test.ts",
  }],
  ["docs/operating.md", "docker run --rm -e POSTGRES_PASSWORD=rehearsal", {
    kind: "runs",
    section: "Rehearse the production setup without GitLab",
    runBy: "tests/rehearsal_test.ts",
  }],
  ["docs/operating.md", "export GITLAB_URL=http://127.0.0.1:9000", {
    kind: "runs",
    section: "Rehearse the production setup without GitLab",
    runBy: "tests/rehearsal_test.ts",
  }],
  ["docs/mcp-clients.md", "AUTH=https://auth.example.com", {
    kind: "not run",
    says: /Set `AUTH` to your service's `BASE_URL`/,
  }],
  ["docs/mcp-clients.md", "# A key pair the client keeps", { kind: "tasks" }],
  ["docs/mcp-clients.md", "# MACHINE_ACCESS_FILE", {
    kind: "runs",
    section: "Machine clients: client credentials",
    runBy: "tests/client_credentials_test.ts",
  }],
  ["docs/resource-servers.md", 'import { createServer } from "node:http";', {
    kind: "file",
    path: "deploy/examples/node/resource_server.mjs",
    runBy: "tests/node_jose_test.ts",
  }],
  ["docs/resource-servers.md", 'import { createResourceGuard } from "../../mod.ts";', {
    kind: "file",
    path: "deploy/examples/resource_server_deno.ts",
    runBy: "tests/node_jose_test.ts",
  }],
  ["docs/gateway.md", "{", { kind: "config", as: "policy" }],
  ["docs/gateway.md", "MCP_UPSTREAM_URL=http://127.0.0.1:3002/mcp", { kind: "config", as: "env" }],
  ["docs/gateway.md", "MCP_UPSTREAM_URL=https://gitlab.com/api/v4/mcp", {
    kind: "config",
    as: "env",
  }],
  ["docs/gateway.md", "servers:", { kind: "config", as: "servers" }],
  ["docs/gateway.md", "MCP_UPSTREAM_URL=http://127.0.0.1:3000/mcp \\", {
    kind: "not run",
    says: /`\/etc\/gitlab-mcp-auth\/servers\.yaml` is the file above/,
  }],
  ["docs/gateway.md", "# MACHINE_ACCESS_FILE", {
    kind: "runs",
    section: "## Machine callers",
    runBy: "tests/machine_access_file_test.ts",
  }],
  ["docs/gateway.md", "# .gitlab-ci.yml", {
    kind: "not run",
    says: /GitLab runs this job, not the tests/,
  }],
  ["docs/security.md", "REDIRECT_URI_POLICY=registered", {
    kind: "runs",
    section: "Client allow-list",
    runBy: "tests/readme_setup_test.ts",
  }],
  ["docs/security.md", "RATE_LIMIT_EXEMPT=203.0.113.7", { kind: "config", as: "env" }],
  ["docs/operating.md", "scrape_configs:", {
    kind: "not run",
    says: /Prometheus's own configuration, not run by the tests/,
  }],
  ["docs/development.md", "npx -y deno@2.9.6 task test", { kind: "tasks" }],
  ["bench/README.md", "deno task bench", { kind: "tasks" }],
  ["bench/README.md", "../shared/bench/run-all.sh", {
    kind: "not run",
    says: /outside this repository \(`\.\.\/shared`\), not run by the tests/,
  }],
];

async function allBlocks(): Promise<Block[]> {
  const all: Block[] = [];
  for (const file of DOCS) {
    all.push(...blocksOf(file, await Deno.readTextFile(new URL(file, ROOT))));
  }
  return all;
}

function proofOf(block: Block): Proof | undefined {
  const matching = PROOFS.filter(([file, first]) =>
    file === block.file && block.first.startsWith(first)
  );
  assert.ok(matching.length <= 1, `${block.file}: "${block.first}" matches two entries`);
  return matching[0]?.[2];
}

Deno.test("docs: every code block is listed with how it is proven, and every listed one exists", async () => {
  const blocks = await allBlocks();
  const unlisted = blocks.filter((block) => proofOf(block) === undefined)
    .map((block) => `${block.file}: ${block.first}`);
  assert.deepEqual(unlisted, [], "blocks nobody runs or explains");
  for (const [file, first] of PROOFS) {
    assert.ok(
      blocks.some((block) => block.file === file && block.first.startsWith(first)),
      `${file} has no block starting "${first}"`,
    );
  }
});

/** The lines of a shell block as commands: comments and line continuations resolved. */
function commandsOf(text: string): string[] {
  return text.replace(/\\\n\s*/g, " ").split("\n")
    .map((line) => line.replace(/(^|\s+)#.*$/, "").trim())
    .filter((line) => line !== "");
}

function checkTasks(block: Block, tasks: Record<string, string>): void {
  for (const command of commandsOf(block.text)) {
    const task = command.match(/\bdeno(?:@[\d.]+)? task ([\w-]+)/)?.[1];
    if (task) {
      assert.ok(tasks[task], `${block.file}: deno task ${task} is not in deno.json`);
      continue;
    }
    const script = command.replace(/^(?:[A-Z_]+=(?:<[^>]*>|\S+)\s+)+/, "")
      .match(/^(?:bash )?((?:\.\.?\/|\.ci\/|bench\/)[\w./-]+\.sh|\.ci\/run)\b/)
      ?.[1];
    assert.ok(script, `${block.file}: "${command}" is neither a task nor a script`);
    const base = new URL(block.file.includes("/") ? block.file.replace(/[^/]+$/, "") : "", ROOT);
    const path = new URL(script, script.startsWith("../") ? base : ROOT);
    assert.ok(Deno.statSync(path).isFile, `${block.file}: ${script} exists`);
  }
}

/** The code of a file after its header comment. */
async function codeOf(path: string): Promise<string> {
  const lines = (await Deno.readTextFile(new URL(path, ROOT))).split("\n");
  let start = 0;
  if (lines[0].startsWith("/**")) {
    start = lines.findIndex((line) => line.trimEnd().endsWith("*/")) + 1;
  } else while (lines[start]?.startsWith("//")) start++;
  return lines.slice(start).join("\n").trim();
}

/** What every configuration needs besides the block's own lines. */
const BASE_ENV = { GITLAB_CLIENT_ID: "docs-app", JWT_SECRET: TEST_SECRET };

/** `NAME=value` lines of a shell block, quotes removed. */
function envOf(text: string): Record<string, string> {
  return Object.fromEntries(
    commandsOf(text).map((line) => {
      const [, name, value] = line.match(/^([A-Z][A-Z0-9_]*)=(.*)$/) ?? [];
      assert.ok(name, `"${line}" is not NAME=value`);
      return [name, value.replace(/^"(.*)"$/, "$1")];
    }),
  );
}

async function checkConfig(block: Block, as: "env" | "policy" | "servers"): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "docs-snippet-" });
  try {
    let env: Record<string, string>;
    if (as === "env") env = envOf(block.text);
    else {
      const path = `${dir}/${as === "policy" ? "policy.json" : "servers.yaml"}`;
      await Deno.writeTextFile(path, block.text);
      env = {
        MCP_UPSTREAM_URL: "http://127.0.0.1:3000/mcp",
        [as === "policy" ? "MCP_POLICY_FILE" : "MCP_SERVERS_FILE"]: path,
      };
    }
    try {
      loadConfig({ ...BASE_ENV, ...env });
    } catch (error) {
      if (error instanceof ConfigError) assert.fail(`${block.file}: "${block.first}": ${error}`);
      throw error;
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("docs: each code block is proven as listed", async (t) => {
  const tasks = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT))).tasks;
  for (const block of await allBlocks()) {
    const proof = proofOf(block);
    if (!proof) continue;
    await t.step(`${block.file}: ${block.first.slice(0, 60)}`, async () => {
      switch (proof.kind) {
        case "tasks":
          return checkTasks(block, tasks);
        case "file": {
          assert.equal(block.text.trim(), await codeOf(proof.path), `${proof.path} as printed`);
          const runner = await Deno.readTextFile(new URL(proof.runBy, ROOT));
          assert.ok(runner.includes(proof.path), `${proof.runBy} runs ${proof.path}`);
          return;
        }
        case "runs": {
          const runner = await Deno.readTextFile(new URL(proof.runBy, ROOT));
          assert.ok(runner.includes(proof.section), `${proof.runBy} reads "${proof.section}"`);
          return;
        }
        case "config":
          return await checkConfig(block, proof.as);
        case "not run":
          // Prose wraps anywhere: the words are matched with any whitespace between them.
          assert.match(`${block.before}\n${block.after}`.replace(/\s+/g, " "), proof.says);
      }
    });
  }
});
