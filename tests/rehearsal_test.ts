/**
 * `deno task sim-gitlab` (issue 33 §2.5) and docs/operating.md's "Rehearse the production setup without
 * GitLab", run as printed: its sim-gitlab command, the example MCP server, and the service's
 * exports (strict, PostgreSQL, a group allow-list, a policy) with only the ports moved to free
 * ones and Docker's PostgreSQL replaced by a throwaway cluster. Ada is admitted and calls
 * `whoami`; bob is admitted and refused `whoami` by the policy; carol is refused by the service's
 * own page; each approving as `--approve-as` chose, on the simulated GitLab's Authorize.
 */

import assert from "node:assert/strict";
import { consentFormOf, CookieJar, PKCE, TEST_SECRET } from "./_helpers.ts";
import { freePort, waitUntilListening } from "./_node.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";
import { docsPage, readmeSection, shellBlocks } from "./_readme.ts";
import {
  decideAtGitLab,
  fetchJson,
  postMcpOverHttp,
  postToken,
  type ServiceProcess,
  spawnService,
} from "./_service.ts";

const ROOT = new URL("../", import.meta.url);
const SECTION = "Rehearse the production setup without GitLab";
const CLIENT_REDIRECT = "http://127.0.0.1:9/callback";

/** A process started from a line of the rehearsal, stopped by SIGTERM. */
interface Started {
  output: string[];
  stop(): Promise<Deno.CommandStatus>;
}

/** Starts `deno <args>` in the repository with `env`; resolves once `ready` is printed. */
async function startDeno(
  args: string[],
  env: Record<string, string>,
  ready: RegExp,
): Promise<Started> {
  const child = new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output: string[] = [];
  const { promise: started, resolve, reject } = Promise.withResolvers<void>();
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      output.push(...text.split("\n"));
      if (ready.test(text)) resolve();
    }
  };
  const done = Promise.all([collect(child.stdout), collect(child.stderr)]);
  child.status.then((status) => reject(new Error(`exited ${status.code}: ${output.join("\n")}`)));
  await started;
  return {
    output,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch {
        // already gone
      }
      const status = await child.status;
      await done;
      return status;
    },
  };
}

/** The rehearsal's commands, with `npx -y deno@2.9.6` standing for this Deno. */
async function readmeCommands(): Promise<{ simArgs: string[]; mcp: string; exports: string[] }> {
  const blocks = shellBlocks(await readmeSection(SECTION, docsPage("operating.md")));
  const lines = blocks.flat().map((line) => line.replace(/\s+#.*$/, "").trim());
  const sim = lines.find((line) => line.includes("task sim-gitlab"));
  const mcp = lines.find((line) => line.includes("example_mcp_server.ts"));
  assert.ok(sim && mcp, "the section starts sim-gitlab and the example MCP server");
  assert.ok(lines.some((line) => line.startsWith("docker run") && line.includes("postgres")));
  assert.ok(lines.some((line) => line === "npx -y deno@2.9.6 task start"));
  return {
    simArgs: sim.split(/\s+/).slice(sim.split(/\s+/).indexOf("sim-gitlab") + 1),
    mcp,
    exports: lines.filter((line) => line.startsWith("export ")),
  };
}

/** Rewrites the rehearsal's ports (9000, 3000, 8000) to free ones. */
function movePorts(text: string, ports: Record<string, number>): string {
  return text.replace(/\b(9000|3000|8000)\b/g, (port) => String(ports[port]));
}

/** `export NAME=value` lines as an environment; `$(…)` stands for a fresh secret. */
function environmentOf(exports: string[]): Record<string, string> {
  return Object.fromEntries(exports.map((line) => {
    const [, name, value] = line.match(/^export ([A-Z_]+)=(.*)$/) ?? [];
    assert.ok(name, line);
    const unquoted = value.replace(/^"(.*)"$/, "$1");
    return [name, unquoted.startsWith("$(") ? TEST_SECRET : unquoted];
  }));
}

/** Registers a client, signs in through the simulated GitLab's page; the callback's answer. */
async function signIn(serviceUrl: string): Promise<{ callback: Response; clientId: string }> {
  const registered = await fetchJson(`${serviceUrl}/register`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ redirect_uris: [CLIENT_REDIRECT], token_endpoint_auth_method: "none" }),
  });
  assert.equal(registered.status, 201, JSON.stringify(registered.body));
  const jar = new CookieJar();
  const query = new URLSearchParams({
    response_type: "code",
    client_id: registered.body.client_id,
    redirect_uri: CLIENT_REDIRECT,
    code_challenge: PKCE.challenge,
    code_challenge_method: "S256",
    state: "rehearsal",
    resource: `${serviceUrl}/mcp`,
  });
  const page = await fetch(`${serviceUrl}/authorize?${query}`);
  jar.store(page);
  const consented = await fetch(`${serviceUrl}/oauth/consent`, {
    method: "POST",
    headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ ...consentFormOf(await page.text()), action: "continue" }),
    redirect: "manual",
  });
  jar.store(consented);
  const atGitLab = new URL(consented.headers.get("location") ?? "");
  const gitlabPage = await (await fetch(atGitLab)).text();
  assert.match(gitlabPage, />Authorize<\/button>/, "GitLab's word on its button");
  const back = await decideAtGitLab(atGitLab, "approve");
  const callback = await fetch(back, { headers: jar.headers(), redirect: "manual" });
  return { callback, clientId: registered.body.client_id };
}

/** Signs in (expecting a code) and calls `whoami` through the gateway. */
async function whoami(serviceUrl: string): Promise<Record<string, unknown>> {
  const { callback, clientId } = await signIn(serviceUrl);
  assert.equal(callback.status, 302, await callback.text());
  const code = new URL(callback.headers.get("location") ?? "").searchParams.get("code") ?? "";
  const tokens = await postToken(serviceUrl, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: CLIENT_REDIRECT,
    client_id: clientId,
  });
  assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
  const answer = await postMcpOverHttp(serviceUrl, tokens.body.access_token, {
    method: "tools/call",
    params: { name: "whoami", arguments: {} },
  });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body;
}

Deno.test({
  name:
    "Rehearsal as printed: strict, PostgreSQL, groups and policy against deno task sim-gitlab (ada, bob, carol)",
  ignore: ignorePostgresTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const { simArgs, mcp, exports } = await readmeCommands();
    const ports = { "9000": freePort(), "3000": freePort(), "8000": freePort() };
    const startSim = (approveAs: string) => {
      const args = simArgs.map((arg, i) => simArgs[i - 1] === "--approve-as" ? approveAs : arg);
      return startDeno(
        ["task", "sim-gitlab", ...args, "--port", String(ports["9000"])],
        {},
        /Simulated GitLab on/,
      );
    };
    const [mcpEnv, mcpArgs] = (() => {
      const words = movePorts(mcp, ports).split(/\s+/);
      const env = Object.fromEntries(
        words.filter((word) => /^[A-Z_]+=/.test(word)).map((word) => word.split("=", 2)),
      );
      return [env, words.slice(words.indexOf("run"))];
    })();
    const env = environmentOf(exports.map((line) => movePorts(line, ports)));
    env.DATABASE_URL = await (await sharedPostgres()).createDatabase();
    env.MCP_POLICY_FILE = new URL(env.MCP_POLICY_FILE, ROOT).pathname;

    let sim = await startSim("ada");
    const example = new Deno.Command(Deno.execPath(), {
      args: mcpArgs,
      cwd: ROOT,
      env: mcpEnv,
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    let service: ServiceProcess | undefined;
    try {
      assert.match(sim.output.join("\n"), /acme\/platform: ada as developer/);
      await waitUntilListening(ports["3000"]);
      service = await spawnService({ ...env, PORT: String(ports["8000"]) });
      assert.equal(service.listening.securityProfile, "strict");
      assert.equal(service.listening.signIn, "redirect");
      const url = service.url;

      const ada = await whoami(url);
      const [content] = (ada.result as { content: { text: string }[] }).content;
      assert.equal(JSON.parse(content.text).username, "ada", JSON.stringify(ada));
      assert.equal(ada.error, undefined, JSON.stringify(ada));

      await sim.stop();
      sim = await startSim("bob");
      const bob = await whoami(url);
      assert.equal(bob.result, undefined, JSON.stringify(bob));
      assert.match(JSON.stringify(bob.error), /not allowed/, JSON.stringify(bob));

      await sim.stop();
      sim = await startSim("carol");
      const { callback: carol } = await signIn(url);
      const page = await carol.text();
      assert.equal(carol.status, 403, page);
      assert.match(page, /@carol/);
    } finally {
      await service?.stop();
      assert.equal((await sim.stop()).code, 0, "sim-gitlab stops cleanly on SIGTERM");
      example.kill();
      await example.status;
    }
  },
});

Deno.test("deno task sim-gitlab: runs with no flags on port 9000 as ada, or says the port is taken", async () => {
  let free = true;
  try {
    Deno.listen({ hostname: "127.0.0.1", port: 9000 }).close();
  } catch {
    free = false;
  }
  if (free) {
    const sim = await startDeno(["task", "sim-gitlab"], {}, /Simulated GitLab on/);
    try {
      assert.match(sim.output.join("\n"), /on http:\/\/127\.0\.0\.1:9000 /);
      assert.match(sim.output.join("\n"), /Users: ada \(id 4242\)/);
      const page = await (await fetch("http://127.0.0.1:9000/oauth/device")).text();
      assert.match(page, /<strong>ada<\/strong>/);
    } finally {
      assert.equal((await sim.stop()).code, 0);
    }
  } else {
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["task", "sim-gitlab"],
      cwd: ROOT,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(output.code, 1);
    assert.match(new TextDecoder().decode(output.stderr), /port 9000 is in use \(--port/);
  }
});

Deno.test("deno task sim-gitlab: a bad flag or file stops it with one line naming it, exit 2", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "sim-gitlab-test-" });
  try {
    await Deno.writeTextFile(`${dir}/bad.json`, JSON.stringify({ users: ["ada:1"], groups: [] }));
    const cases: [string[], RegExp][] = [
      [["--port", "x"], /--port: a port number/],
      [["--user", "ada"], /--user: name:id/],
      [["--user", "ada:1", "--user", "ADA:2"], /username ada twice/],
      [["--member", "acme:ada:admin"], /role is one of .*developer/],
      [["--member", "acme:bob:guest"], /no user "bob"/],
      [["--approve-as", "bob"], /--approve-as: no user "bob"/],
      [["--file", `${dir}/bad.json`], /unknown: groups/],
      [["--file", `${dir}/missing.json`], /--file .*missing\.json/],
      [["--colour"], /Unknown option '--colour'/],
    ];
    for (const [args, message] of cases) {
      await t.step(args.join(" "), async () => {
        const output = await new Deno.Command(Deno.execPath(), {
          args: ["task", "sim-gitlab", ...args],
          cwd: ROOT,
          env: { NO_COLOR: "1" },
          stdin: "null",
          stdout: "piped",
          stderr: "piped",
        }).output();
        const lines = new TextDecoder().decode(output.stderr).split("\n")
          .filter((line) => line.startsWith("sim-gitlab:"));
        assert.equal(output.code, 2);
        assert.equal(lines.length, 1);
        assert.match(lines[0], message);
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deno task sim-gitlab --file: users, members and approve_as from a file; flags add to it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "sim-gitlab-test-" });
  const port = freePort();
  try {
    await Deno.writeTextFile(
      `${dir}/sim.json`,
      JSON.stringify({
        port,
        users: ["ada:4242", "bob:4343"],
        members: ["acme:bob:maintainer"],
        approve_as: "bob",
      }),
    );
    const sim = await startDeno(
      ["task", "sim-gitlab", "--file", `${dir}/sim.json`, "--member", "acme/web:ada:reporter"],
      {},
      /Simulated GitLab on/,
    );
    try {
      const text = sim.output.join("\n");
      assert.match(text, new RegExp(`on http://127\\.0\\.0\\.1:${port} `));
      assert.match(text, /acme: bob as maintainer/);
      assert.match(text, /acme\/web: ada as reporter/);
      assert.match(text, /sign in as bob/);
      const page = await (await fetch(`http://127.0.0.1:${port}/oauth/device`)).text();
      assert.match(page, /<strong>bob<\/strong>/);
    } finally {
      assert.equal((await sim.stop()).code, 0);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
