/**
 * `ci:` rules naming GitLab ids (`project_id`, `namespace_id`), over real HTTP: the real app on
 * loopback in front of a scripted MCP server, CI jobs' ID tokens signed by the fake GitLab's key
 * and traded at /token with the JWT bearer grant. A path can be renamed and then taken by another
 * project, an id cannot: a job of the right id under a new path is admitted by an id rule (at the
 * token endpoint and again at the gateway, which matches the token's `ci_project_id`), a job of
 * the right path but another id is refused by a rule naming both; the id is in the log and audit
 * lines. An id that is not digits stops start-up in one line, and a reload bringing one keeps the
 * rules in force.
 */

import assert from "node:assert/strict";
import { auditLines, type GatewayServer, startGateway, startScripted } from "./_gateway_mcp.ts";
import { TEST_BASE, TEST_SECRET } from "./_helpers.ts";
import { createLogger } from "../src/logger.ts";
import { followConfigFiles } from "../src/app/file_reloads.ts";

const GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/** Project 20 (wherever it lives now); acme/app only while it is project 20; namespace 72's. */
const ACCESS = `ci:
  - project_id: 20
    servers: [default]
    tools: [get_*]
  - project: acme/app
    project_id: ["30", 31]
    servers: [default]
  - namespace_id: [72]
    ref: release/*
    servers: [default]
`;

interface IdsApp {
  g: GatewayServer;
  /** The access file's path. */
  access: string;
  /** POSTs the JWT bearer grant with an ID token carrying `claims` over GitLab's. */
  trade(claims: Record<string, unknown>): Promise<{ status: number; body: Record<string, string> }>;
  /** Calls the tool `name` through /mcp with `token`. */
  call(token: string, name: string): Promise<Response>;
  close(): Promise<void>;
}

async function idsApp(): Promise<IdsApp> {
  const upstream = startScripted(async (request) => {
    const message = await request.json();
    return Response.json({
      jsonrpc: "2.0",
      id: message.id,
      result: { content: [{ type: "text", text: `called ${message.params.name}` }] },
    });
  });
  const dir = await Deno.makeTempDir();
  const access = `${dir}/access.yaml`;
  await Deno.writeTextFile(access, ACCESS);
  const g = await startGateway(upstream.url, {
    env: { MACHINE_ACCESS_FILE: access },
    signIn: false,
  });
  const origin = new URL(g.mcpUrl).origin;
  return {
    g,
    access,
    async trade(claims) {
      const assertion = await g.t.upstream.idTokens.sign(TEST_BASE, g.t.clock.now(), claims);
      const response = await fetch(`${origin}/token`, {
        method: "POST",
        body: new URLSearchParams({ grant_type: GRANT, assertion }),
      });
      return { status: response.status, body: await response.json() };
    },
    call: (token, name) =>
      fetch(g.mcpUrl, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${token}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "tools/call",
          params: { name, arguments: {} },
        }),
      }),
    async close() {
      await g.close();
      await upstream.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function claimsOf(accessToken: string): Record<string, unknown> {
  const payload = accessToken.split(".")[1];
  return JSON.parse(
    new TextDecoder().decode(Uint8Array.fromBase64(payload, { alphabet: "base64url" })),
  );
}

Deno.test("ci ids: a job of the rule's project_id under a renamed path is admitted, at /token and at the gateway", async () => {
  const a = await idsApp();
  try {
    // Project 20 was acme/app; its group was renamed.
    const renamed = await a.trade({ project_path: "acme-renamed/app", project_id: "20" });
    assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
    const claims = claimsOf(renamed.body.access_token);
    assert.equal(claims.sub, "ci:acme-renamed/app");
    assert.equal(claims.ci_project_id, "20");
    assert.equal(claims.ci_namespace_id, "72");
    const called = await (await a.call(renamed.body.access_token, "get_issue")).json();
    assert.equal(called.result.content[0].text, "called get_issue");
    // The rule found again at the gateway is the id rule: its tools apply.
    const refused = await (await a.call(renamed.body.access_token, "delete_project")).json();
    assert.equal(refused.error.code, -32403);

    const issued = a.g.lines.find((line) => line.grant === GRANT);
    assert.equal(issued?.ciProject, "acme-renamed/app");
    assert.equal(issued?.ciProjectId, "20");
    assert.equal(issued?.ciRule, "ci rule 0");
    const audited = auditLines(a.g.lines).find((line) => line.name === "get_issue");
    assert.equal(audited?.ciProject, "acme-renamed/app");
    assert.equal(audited?.ciProjectId, "20");

    // Another project now at a path no rule names by pattern: no id of a rule, no token.
    const other = await a.trade({ project_path: "elsewhere/app", project_id: "21" });
    assert.equal(other.status, 400);
    assert.equal(other.body.error_description, "no rule admits elsewhere/app at ref main");
    const refusedLine = a.g.lines.find((line) =>
      line.message === "CI job refused: no rule admits it"
    );
    assert.equal(refusedLine?.ciProjectId, "21");
    // A job whose ID token carries no project_id matches no id rule.
    const without = await a.trade({ project_path: "acme-renamed/app", project_id: undefined });
    assert.equal(without.status, 400);
  } finally {
    await a.close();
  }
});

Deno.test("ci ids: a rule naming path and id refuses the path taken over by another project; namespace_id matches exactly", async () => {
  const a = await idsApp();
  try {
    const own = await a.trade({ project_path: "acme/app", project_id: "31", namespace_id: "9" });
    assert.equal(own.status, 200, JSON.stringify(own.body));
    assert.equal(claimsOf(own.body.access_token).ci_project_id, "31");
    // acme/app was freed by a rename and made again by someone else: a new project id.
    const taken = await a.trade({ project_path: "acme/app", project_id: "99", namespace_id: "9" });
    assert.equal(taken.status, 400);
    assert.equal(taken.body.error, "invalid_grant");
    // Both must match: project 30 under another path is not acme/app.
    const moved = await a.trade({
      project_path: "acme/moved",
      project_id: "30",
      namespace_id: "9",
    });
    assert.equal(moved.status, 400);

    const release = { ref: "release/1.2", project_id: "500" };
    const inGroup = await a.trade({ ...release, project_path: "any/path", namespace_id: "72" });
    assert.equal(inGroup.status, 200, JSON.stringify(inGroup.body));
    for (const namespace_id of ["720", "7", " 72", undefined]) {
      const answer = await a.trade({ ...release, project_path: "acme/x", namespace_id });
      assert.equal(answer.status, 400, String(namespace_id));
    }
  } finally {
    await a.close();
  }
});

Deno.test("ci ids: a token issued under an id rule is refused at the gateway once the rule names another id", async () => {
  const a = await idsApp();
  const logger = createLogger(() => {});
  const files = followConfigFiles(a.g.t.deps, logger, {});
  try {
    const issued = await a.trade({ project_path: "acme-renamed/app", project_id: "20" });
    assert.equal(issued.status, 200);
    await Deno.writeTextFile(a.access, ACCESS.replace("project_id: 20", "project_id: 21"));
    files.reload();
    const refused = await a.call(issued.body.access_token, "get_issue");
    assert.equal(refused.status, 401);
    await refused.body?.cancel();
  } finally {
    files.stop();
    await a.close();
  }
});

Deno.test("ci ids: an id that is not digits is refused on reload in one line, and the rules in force stay", async () => {
  const a = await idsApp();
  const lines: Record<string, unknown>[] = [];
  const files = followConfigFiles(
    a.g.t.deps,
    createLogger((line) => lines.push(JSON.parse(line))),
    {},
  );
  try {
    const cases: [string, RegExp][] = [
      ["project_id: acme", /ci rule 0 project_id: "acme" is not a GitLab id/],
      ["project_id: '020'", /ci rule 0 project_id: "020" is not a GitLab id/],
      ["project_id: []", /ci rule 0 project_id: must name at least one id/],
      ["project_id: [20, -1]", /ci rule 0 project_id: -1 is not a GitLab id/],
      ["project_id: 2.5", /ci rule 0 project_id: 2.5 is not a GitLab id/],
      ["project_id: 20\n    namespace_id: {id: 7}", /ci rule 0 namespace_id: .* is not a GitLab/],
    ];
    for (const [replacement, expected] of cases) {
      lines.length = 0;
      await Deno.writeTextFile(a.access, ACCESS.replace("project_id: 20", replacement));
      files.reload();
      const message = String(lines.find((line) => line.level === "error")?.message);
      assert.match(message, /^MACHINE_ACCESS_FILE not reloaded, the rules in force stay: /);
      assert.match(message, expected);
      assert.ok(!message.includes("\n"), message);
      const still = await a.trade({ project_path: "acme-renamed/app", project_id: "20" });
      assert.equal(still.status, 200, replacement);
    }
  } finally {
    files.stop();
    await a.close();
  }
});

Deno.test("ci ids: an id that is not digits, or a rule naming no project at all, stops start-up in one line", async () => {
  const dir = await Deno.makeTempDir();
  try {
    for (
      const [rule, expected] of [
        ["project_id: 12ab", /ci rule 0 project_id: "12ab" is not a GitLab id/],
        ["ref: main", /ci rule 0: must name its project: project, project_id or namespace_id/],
      ] as [string, RegExp][]
    ) {
      await Deno.writeTextFile(`${dir}/access.yaml`, `ci:\n  - ${rule}\n    servers: [default]\n`);
      const output = await new Deno.Command(Deno.execPath(), {
        args: ["run", "--allow-all", new URL("../main.ts", import.meta.url).pathname, "start"],
        env: {
          GITLAB_CLIENT_ID: "app",
          JWT_SECRET: TEST_SECRET,
          BASE_URL: "https://auth.example.com",
          MACHINE_ACCESS_FILE: `${dir}/access.yaml`,
          KV_PATH: ":memory:",
          PORT: "0",
        },
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(30_000),
      }).output();
      assert.equal(output.code, 1);
      const printed = new TextDecoder().decode(output.stdout).trim().split("\n");
      assert.equal(printed.length, 1, printed.join("\n"));
      const { level, message } = JSON.parse(printed[0]);
      assert.equal(level, "error");
      assert.match(message, /^configuration error: MACHINE_ACCESS_FILE: /);
      assert.match(message, expected);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
