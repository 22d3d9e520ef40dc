/**
 * Machine callers at the gateway (issue 37 §1, §2), over real HTTP: the real app in gateway mode
 * in front of a scripted MCP server (at /mcp and at /mcp/docs), with machine tokens as the
 * service issues them (`sub` `ci:<project>` or `client:<client_id>`). A caller reaches only its
 * rule's servers and calls only its rule's tools (refused calls answered as the policy's are,
 * never forwarded; lists filtered; other methods pass), MCP_POLICY_FILE is never asked for it,
 * the MCP server receives the rule's GitLab token or none at all, the rule in force is applied
 * on every call (a reload narrowing it bites at the next call, a broken one changes nothing),
 * and the audit line names the caller's kind and, for a CI job, its project, pipeline and job.
 */

import assert from "node:assert/strict";
import { auditLines, type GatewayServer, startGateway, startScripted } from "./_gateway_mcp.ts";
import { FakeClock, issueTokens, TEST_BASE } from "./_helpers.ts";
import { type CiJob, ciTokenClaims } from "../src/machine/caller.ts";
import { machineSubject } from "../src/jwt.ts";
import { issueMachineToken } from "../src/machine/token.ts";
import { followConfigFiles } from "../src/app/file_reloads.ts";
import { addClient, basic } from "./_machine_clients.ts";
import { clientSecretHash } from "../src/grants/client_auth/client_secret.ts";

const TOOLS = ["get_issue", "search_code", "delete_project"];

/** An MCP server listing TOOLS, answering every call with the token headers that reached it. */
function mcpServer() {
  const seen: { method: string; authorization: string | null; privateToken: string | null }[] = [];
  const scripted = startScripted(async (request) => {
    const message = await request.json();
    seen.push({
      method: message.method,
      authorization: request.headers.get("authorization"),
      privateToken: request.headers.get("private-token"),
    });
    const result = message.method === "tools/list"
      ? { tools: TOOLS.map((name) => ({ name, inputSchema: { type: "object" } })) }
      : message.method === "prompts/list"
      ? { prompts: [{ name: "summarise" }] }
      : { content: [{ type: "text", text: `called ${message.params?.name}` }] };
    return Response.json({ jsonrpc: "2.0", id: message.id, result });
  });
  return { ...scripted, seen };
}

const ACCESS = `ci:
  - project: acme/*
    ref: main
    servers: [default]
    tools: [search_*, get_*]
    gitlab_token_file: ./ci-bot.token
  - project: acme/**
    servers: [docs]
clients:
  - client_id: nightly
    servers: [default, docs]
    tools: [get_*]
`;

interface MachineGateway {
  gateway: GatewayServer;
  upstream: ReturnType<typeof mcpServer>;
  dir: string;
  close(): Promise<void>;
}

async function machineGateway(
  env: Record<string, string> = {},
  clock: FakeClock | undefined = undefined,
): Promise<MachineGateway> {
  const upstream = mcpServer();
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/access.yaml`, ACCESS);
  await Deno.writeTextFile(`${dir}/ci-bot.token`, "glpat-ci-bot\n");
  await Deno.writeTextFile(
    `${dir}/servers.yaml`,
    `servers:\n  - name: docs\n    url: ${upstream.url}\n    token_header: private-token\n`,
  );
  const gateway = await startGateway(upstream.url, {
    env: {
      MACHINE_ACCESS_FILE: `${dir}/access.yaml`,
      MCP_SERVERS_FILE: `${dir}/servers.yaml`,
      ...env,
    },
    clock,
  });
  // The operator added the client the `clients:` rule names (a deleted one is refused).
  await addClient(gateway.t.store, { id: "nightly", secret: true });
  return {
    gateway,
    upstream,
    dir,
    async close() {
      await gateway.close();
      await upstream.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

const JOB: CiJob = {
  project_path: "acme/app",
  ref: "main",
  ref_type: "branch",
  ref_protected: "true",
  pipeline: "1234",
  job: "5678",
};

/** A machine token as the grants issue it, for `resource` (default: /mcp). */
async function machineToken(
  m: MachineGateway,
  caller: { ci: CiJob } | { client: string },
  resource?: string,
): Promise<string> {
  const { t } = m.gateway;
  const access = t.deps.machineAccess.current()!;
  const issuing = "ci" in caller
    ? {
      subject: machineSubject("ci", caller.ci.project_path),
      clientId: machineSubject("ci", caller.ci.project_path),
      // The rule the grant would have found; the gateway looks it up again by the claims.
      grant: access.ci.find((rule) => rule.servers.includes(resource ? "docs" : "default"))!,
      claims: { ...ciTokenClaims(caller.ci), gitlab_user: "ada" },
    }
    : {
      subject: machineSubject("client", caller.client),
      clientId: caller.client,
      grant: access.clients.find((rule) => rule.clientId === caller.client)!,
    };
  const body = await issueMachineToken(
    {
      signer: t.deps.oauth!.signer,
      clock: t.clock,
      config: t.config,
      servedResources: (issuer) => t.deps.servers.resources(issuer),
    },
    { ...issuing, issuer: TEST_BASE, requestedResource: resource },
  );
  return body.access_token;
}

let nextId = 1;

async function rpc(
  m: MachineGateway,
  token: string,
  method: string,
  params: Record<string, unknown> = {},
  path = "/mcp",
) {
  const id = nextId++;
  const response = await fetch(m.gateway.mcpUrl.replace(/\/mcp$/, path), {
    method: "POST",
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
  });
  const text = await response.text();
  return { id, response, text, body: text ? JSON.parse(text) : undefined };
}

const callTool = (m: MachineGateway, token: string, name: string, path?: string) =>
  rpc(m, token, "tools/call", { name, arguments: {} }, path);

Deno.test("machine gateway: a CI job calls only its rule's tools, with the rule's GitLab token", async () => {
  const m = await machineGateway();
  try {
    const token = await machineToken(m, { ci: JOB });
    const allowed = await callTool(m, token, "get_issue");
    assert.equal(allowed.response.status, 200);
    assert.equal(allowed.body.result.content[0].text, "called get_issue");
    assert.equal(m.upstream.seen.at(-1)?.authorization, "Bearer glpat-ci-bot");

    const refused = await callTool(m, token, "delete_project");
    assert.equal(refused.response.status, 200);
    assert.equal(refused.body.id, refused.id);
    assert.equal(refused.body.error.code, -32403);
    assert.match(refused.body.error.message, /Tool "delete_project" is not allowed/);
    assert.equal(m.upstream.seen.filter((seen) => seen.method === "tools/call").length, 1);

    const listed = await rpc(m, token, "tools/list");
    assert.deepEqual(listed.body.result.tools.map((tool: { name: string }) => tool.name), [
      "get_issue",
      "search_code",
    ]);
    // Methods other than tools pass, their lists whole.
    const prompts = await rpc(m, token, "prompts/list");
    assert.deepEqual(prompts.body.result.prompts, [{ name: "summarise" }]);

    const lines = auditLines(m.gateway.lines);
    const audited = lines.find((line) => line.name === "delete_project");
    assert.equal(audited?.caller, "ci");
    assert.equal(audited?.ciProject, "acme/app");
    assert.equal(audited?.ciPipeline, "1234");
    assert.equal(audited?.ciJob, "5678");
    assert.equal(audited?.policy, "deny");
    assert.equal(audited?.username, "ci:acme/app");
    assert.ok(!JSON.stringify(m.gateway.lines).includes("glpat-ci-bot"));
  } finally {
    await m.close();
  }
});

Deno.test("machine gateway: a client gets no GitLab token when its rule has none, at each of its servers", async () => {
  const m = await machineGateway();
  try {
    const atMcp = await machineToken(m, { client: "nightly" });
    const answer = await callTool(m, atMcp, "get_issue");
    assert.equal(answer.body.result.content[0].text, "called get_issue");
    assert.deepEqual(m.upstream.seen.at(-1), {
      method: "tools/call",
      authorization: null,
      privateToken: null,
    });
    assert.equal((await callTool(m, atMcp, "search_code")).body.error.code, -32403);
    const atDocs = await machineToken(m, { client: "nightly" }, `${TEST_BASE}/mcp/docs`);
    const docs = await callTool(m, atDocs, "get_issue", "/mcp/docs");
    assert.equal(docs.body.result.content[0].text, "called get_issue");
    assert.deepEqual(m.upstream.seen.at(-1), {
      method: "tools/call",
      authorization: null,
      privateToken: null,
    });
    const line = auditLines(m.gateway.lines).at(-1);
    assert.equal(line?.caller, "client");
    assert.equal(line?.clientId, "nightly");
    assert.equal(line?.ciProject, undefined);
  } finally {
    await m.close();
  }
});

Deno.test("machine gateway: RATE_LIMIT_MCP counts a client's messages whatever token carries them, a CI job's per token", async () => {
  const m = await machineGateway(
    { RATE_LIMIT_MCP: "3/60" },
    new FakeClock(Date.parse("2026-01-01T00:00:15Z")),
  );
  try {
    const first = await machineToken(m, { client: "nightly" });
    assert.equal((await callTool(m, first, "get_issue")).response.status, 200);
    assert.equal((await callTool(m, first, "get_issue")).response.status, 200);
    // A new client_credentials token is the same client: it does not start a new count.
    const second = await machineToken(m, { client: "nightly" });
    assert.notEqual(second, first);
    assert.equal((await callTool(m, second, "get_issue")).response.status, 200);
    const limited = await callTool(m, second, "get_issue");
    assert.equal(limited.response.status, 429);
    assert.equal(limited.body.error, "temporarily_unavailable");
    assert.equal((await callTool(m, first, "get_issue")).response.status, 429);
    // Each CI job's token has its own count, whatever the client spent.
    for (const job of ["1", "2"]) {
      const token = await machineToken(m, { ci: { ...JOB, job } });
      for (let i = 0; i < 3; i++) {
        assert.equal((await callTool(m, token, "get_issue")).response.status, 200);
      }
      assert.equal((await callTool(m, token, "get_issue")).response.status, 429);
    }
  } finally {
    await m.close();
  }
});

Deno.test("machine gateway: MCP_POLICY_FILE governs people only", async () => {
  const policy = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(policy, JSON.stringify({ default: "deny" }));
  const m = await machineGateway({ MCP_POLICY_FILE: policy });
  try {
    const token = await machineToken(m, { ci: JOB });
    assert.equal(
      (await callTool(m, token, "get_issue")).body.result.content[0].text,
      "called get_issue",
    );
    const person = (await issueTokens(m.gateway.t)).access_token;
    const refused = await callTool(m, person, "get_issue");
    assert.equal(refused.body.error.code, -32403);
    const personLine = auditLines(m.gateway.lines).at(-1);
    assert.equal(personLine?.caller, "user");
  } finally {
    await m.close();
    await Deno.remove(policy);
  }
});

Deno.test("machine gateway: a changed access file or token file is followed without SIGHUP", async () => {
  const m = await machineGateway();
  const path = `${m.dir}/access.yaml`;
  // What the timer does every few seconds (main.ts): read each file, reload the changed ones.
  const files = followConfigFiles(m.gateway.t.deps, m.gateway.t.deps.logger, {});
  const machineLines = () =>
    m.gateway.lines.filter((line) => String(line.message).startsWith("MACHINE_ACCESS"));
  const ciBotToken = () => m.gateway.t.deps.machineAccess.current()?.ci[0].gitlabToken?.reveal();
  try {
    const token = await machineToken(m, { client: "nightly" });
    assert.ok((await callTool(m, token, "get_issue")).body.result);
    await files.check();
    assert.equal(machineLines().length, 0, "an unchanged file is not reloaded");

    await Deno.writeTextFile(path, ACCESS.replace("tools: [get_*]", "tools: [search_*]"));
    await files.check();
    await files.check();
    assert.equal(machineLines().at(-1)?.message, "MACHINE_ACCESS_FILE reloaded");
    assert.equal((await callTool(m, token, "get_issue")).body.error.code, -32403);

    // A rule's token file rotated (a Kubernetes Secret, say): the rules are read again with it.
    assert.equal(ciBotToken(), "glpat-ci-bot");
    await Deno.writeTextFile(`${m.dir}/ci-bot.token`, "glpat-rotated\n");
    await files.check();
    await files.check();
    assert.equal(machineLines().length, 2);
    assert.equal(ciBotToken(), "glpat-rotated");
  } finally {
    files.stop();
    await m.close();
  }
});

Deno.test("machine gateway: a token file is applied as it held still, not as read again after a later write", async () => {
  const m = await machineGateway();
  const tokenPath = `${m.dir}/ci-bot.token`;
  /** Runs once after the watch's next read of the token file, before that read returns. */
  let afterTokenRead: (() => Promise<void>) | undefined;
  const readText = async (path: string) => {
    const text = await Deno.readTextFile(path);
    const then = path === tokenPath ? afterTokenRead : undefined;
    if (then) afterTokenRead = undefined;
    await then?.();
    return text;
  };
  const files = followConfigFiles(m.gateway.t.deps, m.gateway.t.deps.logger, { readText });
  const ciBotToken = () => m.gateway.t.deps.machineAccess.current()?.ci[0].gitlabToken?.reveal();
  try {
    await Deno.writeTextFile(tokenPath, "glpat-rotated\n");
    await files.check();
    // A writer truncates the file right after the read that finds it held still.
    afterTokenRead = () => Deno.writeTextFile(tokenPath, "");
    await files.check();
    assert.equal(ciBotToken(), "glpat-rotated", "the token that held still is in force");
    assert.equal(
      m.gateway.lines.filter((line) => String(line.message).startsWith("MACHINE_ACCESS")).at(-1)
        ?.message,
      "MACHINE_ACCESS_FILE reloaded",
    );
  } finally {
    files.stop();
    await m.close();
  }
});

Deno.test("machine gateway: a followed token file past 64 KiB is refused as at start-up, though the watch reads up to 4 MiB", async () => {
  const m = await machineGateway();
  const files = followConfigFiles(m.gateway.t.deps, m.gateway.t.deps.logger, {});
  const ciBotToken = () => m.gateway.t.deps.machineAccess.current()?.ci[0].gitlabToken?.reveal();
  try {
    await files.check();
    await Deno.writeTextFile(`${m.dir}/ci-bot.token`, "x".repeat(65 * 1024));
    await files.check();
    await files.check();
    const line = m.gateway.lines.findLast((l) => String(l.message).startsWith("MACHINE_ACCESS"));
    assert.equal(line?.level, "error");
    assert.match(String(line?.message), /ci-bot\.token.*larger than 64 KiB/);
    assert.equal(ciBotToken(), "glpat-ci-bot", "the token in force stays");
  } finally {
    files.stop();
    await m.close();
  }
});

Deno.test("machine gateway: the rule in force decides every call; a broken reload changes nothing", async () => {
  const m = await machineGateway();
  const path = `${m.dir}/access.yaml`;
  // What SIGHUP does (main.ts): every followed file read again, each reload one log line.
  const files = followConfigFiles(m.gateway.t.deps, m.gateway.t.deps.logger, {});
  const sighup = () => {
    files.reload();
    const line = m.gateway.lines.findLast((l) => String(l.message).startsWith("MACHINE_ACCESS"));
    return String(line?.message);
  };
  try {
    const token = await machineToken(m, { client: "nightly" });
    assert.equal((await callTool(m, token, "get_issue")).response.status, 200);
    assert.ok((await callTool(m, token, "get_issue")).body.result);

    // Tools narrowed: the same token is refused the tool at its next call.
    await Deno.writeTextFile(
      path,
      ACCESS.replace(
        "servers: [default, docs]\n    tools: [get_*]",
        "servers: [default, docs]\n    tools: [search_*]",
      ),
    );
    assert.equal(sighup(), "MACHINE_ACCESS_FILE reloaded");
    assert.equal((await callTool(m, token, "get_issue")).body.error.code, -32403);
    assert.ok((await callTool(m, token, "search_code")).body.result);

    // A broken file keeps those rules.
    await Deno.writeTextFile(path, "clients: [{client_id: nightly}]");
    assert.match(sighup(), /^MACHINE_ACCESS_FILE not reloaded, the rules in force stay: .*servers/);
    assert.ok((await callTool(m, token, "search_code")).body.result);
    // So does a rule naming a server that is not served.
    await Deno.writeTextFile(path, ACCESS.replace("servers: [docs]", "servers: [wiki]"));
    assert.match(sighup(), /wiki is not a configured MCP server \(configured: default, docs\)/);
    assert.ok((await callTool(m, token, "search_code")).body.result);

    // The server dropped from the rule: refused there (401), as a token for another server is.
    await Deno.writeTextFile(path, ACCESS.replace("servers: [default, docs]", "servers: [docs]"));
    assert.equal(sighup(), "MACHINE_ACCESS_FILE reloaded");
    const dropped = await callTool(m, token, "get_issue");
    assert.equal(dropped.response.status, 401);
    assert.match(
      dropped.response.headers.get("www-authenticate") ?? "",
      /does not admit this caller at this MCP server/,
    );

    // The rule removed: refused everywhere.
    await Deno.writeTextFile(path, "ci: []\n");
    assert.equal(sighup(), "MACHINE_ACCESS_FILE reloaded");
    const removed = await callTool(m, token, "get_issue");
    assert.equal(removed.response.status, 401);
    assert.match(removed.response.headers.get("www-authenticate") ?? "", /No rule/);
    const calls = m.upstream.seen.filter((seen) => seen.method === "tools/call").length;
    assert.equal(calls, 5);
  } finally {
    await m.close();
  }
});

Deno.test("machine gateway: a CI job whose claims no rule in force admits is refused", async () => {
  const m = await machineGateway();
  try {
    // Issued while a rule admitted it (the rule for /mcp/docs), then presented at /mcp/docs with
    // a ref no rule admits any longer.
    await Deno.writeTextFile(
      `${m.dir}/access.yaml`,
      ACCESS.replace("project: acme/**", "project: acme/**\n    ref: main"),
    );
    assert.equal(m.gateway.t.deps.machineAccess.reload().kind, "reloaded");
    const token = await machineToken(
      m,
      { ci: { ...JOB, ref: "feature/x" } },
      `${TEST_BASE}/mcp/docs`,
    );
    const answer = await callTool(m, token, "get_issue", "/mcp/docs");
    assert.equal(answer.response.status, 401);
    assert.equal(m.upstream.seen.length, 0);
  } finally {
    await m.close();
  }
});

Deno.test("machine gateway: a client deleted and added again under its id (a new secret) does not bring its old tokens back", async () => {
  const m = await machineGateway();
  const { store } = m.gateway.t;
  const tokenWith = async (secret: string) => {
    const response = await fetch(m.gateway.mcpUrl.replace(/\/mcp$/, "/token"), {
      method: "POST",
      headers: basic("nightly", secret),
      body: new URLSearchParams({ grant_type: "client_credentials" }),
    });
    assert.equal(response.status, 200);
    return (await response.json()).access_token as string;
  };
  try {
    // The client as `clients add` stored it, with a secret the test knows.
    const first = (await store.getMachineClient("nightly"))!;
    await store.deleteMachineClient("nightly");
    await store.addMachineClient({
      ...first,
      credential: { method: "client_secret", secretHash: clientSecretHash("leaked") },
    });
    const stolen = await tokenWith("leaked");
    assert.ok((await callTool(m, stolen, "get_issue")).body.result);
    // The secret leaked: the operator deletes the client and adds it again with a new secret.
    await store.deleteMachineClient("nightly");
    assert.equal((await callTool(m, stolen, "get_issue")).response.status, 401);
    await store.addMachineClient({
      ...first,
      credential: { method: "client_secret", secretHash: clientSecretHash("new") },
      createdAt: first.createdAt + 60_000,
    });
    const refused = await callTool(m, stolen, "get_issue");
    assert.equal(refused.response.status, 401);
    assert.match(refused.response.headers.get("www-authenticate") ?? "", /deleted/);
    assert.ok((await callTool(m, await tokenWith("new"), "get_issue")).body.result);
    assert.equal(m.upstream.seen.filter((seen) => seen.method === "tools/call").length, 2);
  } finally {
    await m.close();
  }
});
