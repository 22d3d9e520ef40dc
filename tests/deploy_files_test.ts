/**
 * The deployment files in deploy/ cannot be built here (no image registry, no systemd): these
 * tests hold them to what can be checked. Every variable they set is one the service reads,
 * the sandbox and the volume are where the service keeps KV, and compose's example MCP server
 * answers through the real gateway.
 */

import assert from "node:assert/strict";
import { createExampleMcpServer } from "../deploy/example_mcp_server.ts";
import { listConfigVariables } from "../src/config.ts";
import { signInOverHttp, spawnWithGitLab } from "./_service.ts";

const DEPLOY = new URL("../deploy/", import.meta.url);
const KNOWN = new Set(listConfigVariables().map((variable) => variable.name));

function read(name: string): Promise<string> {
  return Deno.readTextFile(new URL(name, DEPLOY));
}

/** `ENV A=1 \ B=2` of a Dockerfile: the names. */
function dockerfileVariables(dockerfile: string): string[] {
  const env = dockerfile.match(/^ENV ((?:.*\\\n)*.*)$/m)?.[1] ?? "";
  return [...env.matchAll(/([A-Z][A-Z0-9_]*)=/g)].map((match) => match[1]);
}

/** The keys of `services.<service>.environment` in compose.yaml (a map, two-space indents). */
function composeVariables(compose: string, service: string): string[] {
  const block = compose.split(new RegExp(`^  ${service}:\\n`, "m"))[1]?.split(/^ {2}\S/m)[0];
  assert.ok(block, `compose.yaml has a service ${service}`);
  const environment = block.split(/^ {4}environment:\n/m)[1]?.split(/^ {4}\S/m)[0] ?? "";
  return [...environment.matchAll(/^ {6}([A-Z][A-Z0-9_]*):/gm)].map((match) => match[1]);
}

/** `Environment=NAME=value` lines of a systemd unit: the names. */
function unitVariables(unit: string): string[] {
  return [...unit.matchAll(/^Environment=([A-Z][A-Z0-9_]*)=/gm)].map((match) => match[1]);
}

/** `NAME=value` lines of an env file: the names. */
function envFileVariables(text: string): string[] {
  return [...text.matchAll(/^([A-Z][A-Z0-9_]*)=/gm)].map((match) => match[1]);
}

function assertKnown(file: string, names: string[]): void {
  assert.ok(names.length > 0, `${file} sets variables`);
  const unknown = names.filter((name) => !KNOWN.has(name));
  assert.deepEqual(unknown, [], `${file} sets variables the service does not read`);
}

Deno.test("deploy/: every variable set for the service is one it reads", async () => {
  const compose = await read("compose.yaml");
  assertKnown("Dockerfile", dockerfileVariables(await read("Dockerfile")));
  assertKnown("compose.yaml (auth)", composeVariables(compose, "auth"));
  assertKnown("gitlab-mcp-auth.service", unitVariables(await read("gitlab-mcp-auth.service")));
  // env.example feeds the unit and compose: a name there is the service's or compose's own.
  const envExample = envFileVariables(await read("env.example"));
  const forCompose = envExample.filter((name) => !KNOWN.has(name));
  for (const name of forCompose) assert.match(compose, new RegExp(`\\$\\{${name}\\b`), name);
});

Deno.test("deploy/Dockerfile: pinned image, unprivileged, KV on the volume, liveness probe", async () => {
  const dockerfile = await read("Dockerfile");
  assert.match(dockerfile, /^FROM denoland\/deno:2\.9\.6$/m);
  assert.match(dockerfile, /^USER deno$/m);
  const kvPath = dockerfile.match(/KV_PATH=(\S+)/)?.[1] ?? "";
  const volume = dockerfile.match(/^VOLUME (\S+)$/m)?.[1] ?? "";
  assert.ok(volume && kvPath.startsWith(`${volume}/`), `${kvPath} on the volume ${volume}`);
  assert.match(dockerfile, /^RUN deno install --frozen --entrypoint main\.ts$/m);
  assert.match(dockerfile, /^HEALTHCHECK [\s\S]*\/healthz/m);
  const cmd: string[] = JSON.parse(dockerfile.match(/^CMD (\[.*\])$/m)?.[1] ?? "[]");
  assert.deepEqual(cmd.slice(-2), ["main.ts", "start"]);
  const tasks = JSON.parse(await Deno.readTextFile(new URL("../deno.json", DEPLOY))).tasks;
  const v8Flags = tasks.start.split(" ").filter((arg: string) => arg.startsWith("--v8-flags"));
  for (const flag of v8Flags) assert.ok(cmd.includes(flag), `CMD keeps ${flag}`);
});

Deno.test("deploy/gitlab-mcp-auth.service: sandboxed, KV in its state directory", async () => {
  const unit = await read("gitlab-mcp-auth.service");
  for (const line of ["DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes"]) {
    assert.match(unit, new RegExp(`^${line}$`, "m"));
  }
  const state = unit.match(/^StateDirectory=(\S+)$/m)?.[1];
  assert.ok(state);
  assert.match(unit, new RegExp(`^Environment=KV_PATH=/var/lib/${state}/`, "m"));
  assert.doesNotMatch(unit, /^MemoryDenyWriteExecute=yes/m, "V8 needs executable memory");
});

Deno.test("compose's example MCP server answers whoami through the real gateway", async () => {
  // The MCP server's port goes into the service's environment before GitLab's URL is known.
  const gitlabUrl = Promise.withResolvers<URL>();
  const mcp = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (request) => createExampleMcpServer(await gitlabUrl.promise)(request),
  );
  const { gitlab, service, close } = await spawnWithGitLab("example-mcp-app", {
    MCP_UPSTREAM_URL: `http://127.0.0.1:${mcp.addr.port}/mcp`,
  });
  gitlabUrl.resolve(gitlab.url);
  try {
    const { access_token } = await signInOverHttp(service.url, gitlab);
    const response = await fetch(`${service.url}/mcp`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${access_token}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "whoami", arguments: {} },
      }),
    });
    assert.equal(response.status, 200);
    const { result } = await response.json();
    assert.equal(result.isError, undefined, JSON.stringify(result));
    const user = JSON.parse(result.content[0].text);
    assert.equal(typeof user.id, "number");
    assert.equal(typeof user.username, "string");
    assert.ok(user.username.length > 0);
  } finally {
    await close();
    await mcp.shutdown();
  }
});
