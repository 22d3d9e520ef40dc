/**
 * MACHINE_ACCESS_FILE (issue 37 §1, §2): the `ci:` and `clients:` rules read from YAML or JSON,
 * every mistake one line naming the file, the rule and the field; globs as the issue gives them
 * (a project's `*` inside one segment, `**` across, a ref's and environment's `*` across `/`);
 * `ref_protected` matching GitLab's string claim; `project_id` and `namespace_id` matched exactly,
 * a rule naming none of project, project_id, namespace_id refused; token files relative to the access file,
 * trailing whitespace stripped; a rule naming a server that is not configured stops start-up in
 * one line; a reload that cannot be used keeps the rules in force.
 */

import assert from "node:assert/strict";
import { loadConfig } from "../src/app/config.ts";
import { ConfigError } from "../src/config/variable.ts";
import { MachineAccessError, readMachineAccess } from "../src/machine/access_file.ts";
import { createMachineAccessHolder } from "../src/machine/holder.ts";
import { type CiClaims, ciRuleFor, clientRuleFor, toolAllowed } from "../src/machine/rules.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { checkConfiguration } from "../src/app/config_check.ts";

async function folderWith(files: Record<string, string>): Promise<string> {
  const dir = await Deno.makeTempDir();
  for (const [name, text] of Object.entries(files)) {
    await Deno.writeTextFile(`${dir}/${name}`, text);
  }
  return dir;
}

/** The example of docs/gateway.md's "## Machine callers" (the issue's), as printed. */
const ISSUE_EXAMPLE = await docsExample();

async function docsExample(): Promise<string> {
  const docs = await Deno.readTextFile(new URL("../docs/gateway.md", import.meta.url));
  const section = docs.slice(docs.indexOf("\n## Machine callers\n"));
  const example = section.match(/```yaml\n([\s\S]*?)```/)?.[1];
  assert.ok(example?.startsWith("# MACHINE_ACCESS_FILE"), "the section has its yaml block");
  return example ?? "";
}

function job(overrides: Partial<CiClaims> = {}): CiClaims {
  return {
    project_path: "acme/app",
    ref: "main",
    ref_type: "branch",
    ref_protected: "true",
    environment: "production",
    ...overrides,
  };
}

Deno.test("machine access file: the issue's example, its token file relative to it and stripped", async () => {
  const dir = await folderWith({ "access.yaml": ISSUE_EXAMPLE, "ci-bot.token": "glpat-abc \n\n" });
  const access = readMachineAccess(`${dir}/access.yaml`);
  const [rule] = access.ci;
  assert.deepEqual(rule.servers, ["default", "docs"]);
  assert.equal(rule.gitlabToken?.reveal(), "glpat-abc");
  // The token never comes out when the rule is written down.
  assert.ok(!JSON.stringify(access).includes("glpat-abc"));
  assert.equal(ciRuleFor(access, job()), rule);
  assert.ok(toolAllowed(rule, "search_code") && toolAllowed(rule, "get_issue"));
  assert.ok(!toolAllowed(rule, "delete_project"));
  const client = clientRuleFor(access, "nightly-report");
  assert.deepEqual(client?.servers, ["default"]);
  assert.equal(client?.gitlabToken, undefined);
  assert.equal(clientRuleFor(access, "someone-else"), undefined);
  // The example's id rule admits project 4242 on a protected ref whatever its path is now.
  const byId = access.ci[1];
  assert.deepEqual(byId.projectIds, ["4242"]);
  const renamed = job({ project_path: "renamed/app", project_id: "4242", environment: undefined });
  assert.equal(ciRuleFor(access, renamed), byId);
  assert.equal(ciRuleFor(access, { ...renamed, ref_protected: "false" }), undefined);
});

Deno.test("machine access file: each condition of a CI rule must match, GitLab's claims as strings", async () => {
  const dir = await folderWith({ "access.yaml": ISSUE_EXAMPLE, "ci-bot.token": "t" });
  const access = readMachineAccess(`${dir}/access.yaml`);
  assert.ok(ciRuleFor(access, job()));
  assert.equal(ciRuleFor(access, job({ project_path: "acme/group/app" })), undefined);
  assert.equal(ciRuleFor(access, job({ project_path: "other/app" })), undefined);
  assert.equal(ciRuleFor(access, job({ ref: "feature" })), undefined);
  assert.equal(ciRuleFor(access, job({ ref_type: "tag" })), undefined);
  assert.equal(ciRuleFor(access, job({ ref_protected: "false" })), undefined);
  assert.equal(ciRuleFor(access, job({ ref_protected: undefined })), undefined);
  assert.equal(ciRuleFor(access, job({ environment: "staging" })), undefined);
  assert.equal(ciRuleFor(access, job({ environment: undefined })), undefined);
});

Deno.test("machine access file: globs — * one segment, ** any, neither the group itself; refs cross /", async () => {
  const dir = await folderWith({
    "access.json": JSON.stringify({
      ci: [
        { project: "acme/**", ref: "release/*", servers: ["default"] },
        { project: "acme/*", ref_protected: false, environment: "review/*", servers: ["docs"] },
        { project: "solo/app", servers: ["default"] },
      ],
    }),
  });
  const access = readMachineAccess(`${dir}/access.json`);
  const [deep, shallow, solo] = access.ci;
  const claims = (project_path: string, extra: Partial<CiClaims> = {}) =>
    job({ project_path, ref_protected: undefined, environment: undefined, ...extra });
  assert.equal(ciRuleFor(access, claims("acme/a/b/c", { ref: "release/1.2/hotfix" })), deep);
  assert.equal(ciRuleFor(access, claims("acme", { ref: "release/1" })), undefined);
  assert.equal(ciRuleFor(access, claims("acmeco/app", { ref: "release/1" })), undefined);
  assert.equal(
    ciRuleFor(access, claims("acme/app", { ref_protected: "false", environment: "review/x/y" })),
    shallow,
  );
  assert.equal(
    ciRuleFor(access, claims("acme/a/b", { ref_protected: "false", environment: "review/x" })),
    undefined,
  );
  assert.equal(ciRuleFor(access, claims("solo/app")), solo);
  assert.equal(ciRuleFor(access, claims("solo/app2")), undefined);
});

Deno.test("machine access file: project_id and namespace_id, numbers or strings, one or a list, match exactly", async () => {
  const dir = await folderWith({
    "access.json": JSON.stringify({
      ci: [
        { project_id: [20, "21", 20], servers: ["default"] },
        { project: "acme/*", namespace_id: "72", servers: ["docs"] },
      ],
    }),
  });
  const access = readMachineAccess(`${dir}/access.json`);
  const [byId, byNamespace] = access.ci;
  assert.deepEqual(byId.projectIds, ["20", "21"]);
  assert.equal(byId.project, undefined);
  assert.equal(ciRuleFor(access, job({ project_path: "x/y", project_id: "21" })), byId);
  assert.equal(
    ciRuleFor(access, job({ project_id: "2", namespace_id: "72" })),
    byNamespace,
  );
  assert.equal(
    ciRuleFor(access, job({ project_path: "other/app", namespace_id: "72" })),
    undefined,
  );
  assert.equal(ciRuleFor(access, job({ project_id: "200", namespace_id: "7" })), undefined);
  assert.equal(ciRuleFor(access, job()), undefined, "no id claims: no id rule");
});

Deno.test("machine access file: every mistake is one line naming the file, the rule and the field", async () => {
  const cases: [string, RegExp][] = [
    [
      "ci: [{project: acme/x, servers: [default], colour: blue}]",
      /ci rule 0: unknown key "colour"/,
    ],
    ["ci: [{project: acme/x}]", /ci rule 0 servers: must name at least one MCP server/],
    ["ci: [{project: acme/x, servers: []}]", /ci rule 0 servers: must name/],
    [
      "ci: [{project: acme/x, servers: [Default]}]",
      /ci rule 0 servers: "Default" is not a server name/,
    ],
    [
      "ci: [{project: '*/x', servers: [default]}]",
      /ci rule 0 project: must name its top-level group/,
    ],
    [
      "ci: [{project: '**', servers: [default]}]",
      /ci rule 0 project: must name its top-level group/,
    ],
    [
      "ci: [{servers: [default]}]",
      /ci rule 0: must name its project: project, project_id or namespace_id/,
    ],
    ["ci: [{project: null, servers: [default]}]", /ci rule 0 project: must be a pattern/],
    [
      "ci: [{project_id: '*', servers: [default]}]",
      /ci rule 0 project_id: "\*" is not a GitLab id/,
    ],
    [
      "ci: [{project_id: 12345678901234567890, servers: [default]}]",
      /ci rule 0 project_id: .* quote a very long one/,
    ],
    [
      "ci: [{project: acme/x, namespace_id: null, servers: [default]}]",
      /ci rule 0 namespace_id: null is not a GitLab id/,
    ],
    [
      "ci: [{project: acme/x, ref_type: branches, servers: [default]}]",
      /ref_type: must be branch or tag/,
    ],
    [
      "ci: [{project: acme/x, ref_protected: 'true', servers: [default]}]",
      /ref_protected: must be true or false/,
    ],
    [
      "ci: [{project: acme/x, tools: [], servers: [default]}]",
      /ci rule 0 tools: must name at least one/,
    ],
    [
      "ci: [{project: acme/x, tools: ['a b'], servers: [default]}]",
      /ci rule 0 tools: must be a pattern/,
    ],
    [
      "ci: [{project: acme/x, servers: [default], gitlab_token_file: missing.token}]",
      /gitlab_token_file: cannot read .*missing\.token \(NotFound\)/,
    ],
    [
      "ci: [{project: acme/x, servers: [default], gitlab_token_file: empty.token}]",
      /empty\.token must hold one token/,
    ],
    [
      "clients: [{client_id: a, servers: [default]}, {client_id: a, servers: [default]}]",
      /client rule 1 \(a\): client_id a has two rules/,
    ],
    ["clients: [{servers: [default]}]", /client rule 0 client_id: must be a client_id/],
    [
      "clients: [{client_id: a, servers: [default], project: x}]",
      /client rule 0 \(a\): unknown key "project"/,
    ],
    ["ci: {project: acme/x}", /: ci: must be a list/],
    ["people: []", /unknown key "people"/],
    ["ci:\n  - project: a/b\n    project: a/c\n    servers: [default]", /line 3.*not YAML/],
  ];
  const dir = await folderWith({ "empty.token": " \n" });
  for (const [text, expected] of cases) {
    const path = `${dir}/access.yaml`;
    await Deno.writeTextFile(path, text);
    assert.throws(() => readMachineAccess(path), (error: Error) => {
      assert.ok(error instanceof MachineAccessError, String(error));
      assert.ok(error.message.startsWith(`${path}: `), error.message);
      assert.match(error.message, expected);
      assert.ok(!error.message.includes("\n"), error.message);
      return true;
    });
  }
  await Deno.writeTextFile(`${dir}/access.txt`, "ci: []");
  assert.throws(
    () => readMachineAccess(`${dir}/access.txt`),
    /must end in \.yaml, \.yml or \.json/,
  );
});

Deno.test("machine access file: a rule naming a server that is not configured stops start-up in one line", async () => {
  const dir = await folderWith({
    "access.yaml": "ci:\n  - project: acme/x\n    servers: [default, docs]\n",
    "servers.yaml": "servers:\n  - name: docs\n    url: http://127.0.0.1:1/mcp\n",
  });
  const env = {
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    MACHINE_ACCESS_FILE: `${dir}/access.yaml`,
    BASE_URL: "https://auth.example.com",
  };
  // The issuer assertions name must not follow the request's Host.
  const { BASE_URL: _base, ...withoutBase } = env;
  assert.throws(
    () => loadConfig(withoutBase),
    /^ConfigError: BASE_URL: is required with MACHINE_ACCESS_FILE's ci: rules/,
  );
  assert.throws(() => loadConfig(env), (error: Error) => {
    assert.ok(error instanceof ConfigError);
    assert.equal(
      error.message,
      `MACHINE_ACCESS_FILE: ${dir}/access.yaml: ci rule 0 servers: docs is not a configured MCP ` +
        "server (configured: default)",
    );
    return true;
  });
  // `admin config check` reports a bad id as start-up does.
  await Deno.writeTextFile(
    `${dir}/ids.yaml`,
    "ci:\n  - project_id: [20, x]\n    servers: [default]\n",
  );
  assert.deepEqual(
    checkConfiguration({ ...env, MACHINE_ACCESS_FILE: `${dir}/ids.yaml` }).problems,
    [
      `MACHINE_ACCESS_FILE: ${dir}/ids.yaml: ci rule 0 project_id: "x" is not a GitLab id ` +
      "(digits, no leading zero; quote a very long one)",
    ],
  );
  const config = loadConfig({ ...env, MCP_SERVERS_FILE: `${dir}/servers.yaml` });
  assert.deepEqual(config.machineAccessFile?.ci[0].servers, ["default", "docs"]);
});

Deno.test("machine access file: a reload takes a good file and its new token, and keeps the rules on a bad one", async () => {
  const dir = await folderWith({
    "access.yaml":
      "clients:\n  - client_id: bot\n    servers: [default]\n    gitlab_token_file: bot.token\n",
    "bot.token": "first",
  });
  const path = `${dir}/access.yaml`;
  const holder = createMachineAccessHolder(readMachineAccess(path), () => ["default", "docs"]);
  const tokenOf = () => holder.current()?.clients[0].gitlabToken?.reveal();
  assert.equal(tokenOf(), "first");
  await Deno.writeTextFile(`${dir}/bot.token`, "second\n");
  assert.deepEqual(holder.reload(), { kind: "reloaded", path, ci: 0, clients: 1 });
  assert.equal(tokenOf(), "second");
  await Deno.writeTextFile(path, "clients:\n  - client_id: bot\n    servers: [nowhere]\n");
  const kept = holder.reload();
  assert.equal(kept.kind, "kept");
  assert.match(kept.kind === "kept" ? kept.problem : "", /nowhere is not a configured MCP server/);
  await Deno.writeTextFile(path, "clients: [");
  assert.equal(holder.reload().kind, "kept");
  assert.equal(tokenOf(), "second");
  await Deno.remove(`${dir}/bot.token`);
  await Deno.writeTextFile(
    path,
    "clients:\n  - client_id: bot\n    servers: [default]\n    gitlab_token_file: bot.token\n",
  );
  assert.equal(holder.reload().kind, "kept");
  assert.equal(tokenOf(), "second");
});
