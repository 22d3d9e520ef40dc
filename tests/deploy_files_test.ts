/**
 * The deployment files in deploy/ cannot be built here (no image registry, no systemd): these
 * tests hold them to what can be checked. Every variable they set is one the service reads,
 * their values (with env.example filled in) load as a complete configuration, the sandbox and
 * the volume are where the service keeps KV, and compose's example MCP server answers through
 * the real gateway.
 */

import assert from "node:assert/strict";
import { jwtVerify } from "jose";
import { createExampleMcpServer } from "../deploy/example_mcp_server.ts";
import { weakSettings } from "../src/app/weak_settings.ts";
import {
  listConfigVariables,
  listenHostname,
  loadConfig,
  oauthSettings,
} from "../src/app/config.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { postMcpOverHttp, signInOverHttp, spawnWithGitLab } from "./_service.ts";

const DEPLOY = new URL("../deploy/", import.meta.url);
const KNOWN = new Set(listConfigVariables().map((variable) => variable.name));

function read(name: string): Promise<string> {
  return Deno.readTextFile(new URL(name, DEPLOY));
}

/** `ENV A=1 \\ B=2` of a Dockerfile. */
function dockerfileEnv(dockerfile: string): Record<string, string> {
  const env = dockerfile.match(/^ENV ((?:.*\\\n)*.*)$/m)?.[1] ?? "";
  return pairs(env.matchAll(/([A-Z][A-Z0-9_]*)=(\S+)/g));
}

/** `services.<service>.environment` of compose.yaml (a map, two-space indents), unquoted. */
function composeEnv(compose: string, service: string): Record<string, string> {
  const block = compose.split(new RegExp(`^  ${service}:\\n`, "m"))[1]?.split(/^ {2}\S/m)[0];
  assert.ok(block, `compose.yaml has a service ${service}`);
  const environment = block.split(/^ {4}environment:\n/m)[1]?.split(/^ {4}\S/m)[0] ?? "";
  return pairs(environment.matchAll(/^ {6}([A-Z][A-Z0-9_]*): "?([^"\n]*)"?$/gm));
}

/** The files `services.<service>.env_file` of compose.yaml names (one, or a list). */
function composeEnvFiles(compose: string, service: string): string[] {
  const block = compose.split(new RegExp(`^  ${service}:\\n`, "m"))[1]?.split(/^ {2}\S/m)[0] ?? "";
  const scalar = block.match(/^ {4}env_file: *(\S+)$/m)?.[1];
  if (scalar) return [scalar.replace(/^["']|["']$/g, "")];
  const list = block.split(/^ {4}env_file:\n/m)[1]?.split(/^ {4}\S/m)[0] ?? "";
  return [...list.matchAll(/^ {6}- *(?:path: *)?["']?([^"'\n]+)["']?$/gm)].map((match) => match[1]);
}

/**
 * What the container sees: the image's ENV, then the lines of the env files compose passes
 * (deploy/.env is `file`), then compose's `environment`, interpolated from `file` (each wins
 * over the ones before, as compose does).
 */
async function containerEnv(file: Record<string, string>): Promise<Record<string, string>> {
  const compose = await read("compose.yaml");
  const dotEnv = new URL(".env", DEPLOY).href;
  const passed = composeEnvFiles(compose, "auth").some((name) =>
    new URL(name, DEPLOY).href === dotEnv
  );
  const environment = Object.fromEntries(
    Object.entries(composeEnv(compose, "auth")).map(([name, value]) => [
      name,
      interpolate(value, file),
    ]),
  );
  return {
    ...dockerfileEnv(await read("Dockerfile")),
    ...(passed ? file : {}),
    ...environment,
  };
}

/** `EnvironmentFile=` paths of a systemd unit (a leading `-` makes one optional). */
function unitEnvFiles(unit: string): string[] {
  return [...unit.matchAll(/^EnvironmentFile=-?(\S+)$/gm)].map((match) => match[1]);
}

/** `Environment=NAME=value` lines of a systemd unit. */
function unitEnv(unit: string): Record<string, string> {
  return pairs(unit.matchAll(/^Environment=([A-Z][A-Z0-9_]*)=(.*)$/gm));
}

/** `NAME=value` lines of an env file. */
function envFile(text: string): Record<string, string> {
  return pairs(text.matchAll(/^([A-Z][A-Z0-9_]*)=(.*)$/gm));
}

function pairs(matches: Iterable<RegExpMatchArray>): Record<string, string> {
  return Object.fromEntries([...matches].map((match) => [match[1], match[2]]));
}

/**
 * Compose's `${NAME}`, `${NAME:?message}`, `${NAME:-default}` and `${NAME-default}` (the default
 * only when NAME is unset, not when it is empty) with the values of `env`.
 */
function interpolate(value: string, env: Record<string, string>): string {
  return value.replace(
    /\$\{([A-Z][A-Z0-9_]*)(?:(:?)([-?])([^}]*))?\}/g,
    (_, name, colon, kind, rest) => {
      const fallback = kind === "-" ? rest : "";
      return colon === "" && kind ? (env[name] ?? fallback) : (env[name] || fallback);
    },
  );
}

function assertKnown(file: string, names: string[]): void {
  assert.ok(names.length > 0, `${file} sets variables`);
  const unknown = names.filter((name) => !KNOWN.has(name));
  assert.deepEqual(unknown, [], `${file} sets variables the service does not read`);
}

/** env.example as an operator fills it in: the secret and the application id set. */
async function filledEnvExample(): Promise<Record<string, string>> {
  return {
    ...envFile(await read("env.example")),
    GITLAB_CLIENT_ID: "app-id",
    JWT_SECRET: TEST_SECRET,
  };
}

Deno.test("deploy/: every variable set for the service is one it reads", async () => {
  const compose = await read("compose.yaml");
  assertKnown("Dockerfile", Object.keys(dockerfileEnv(await read("Dockerfile"))));
  assertKnown("compose.yaml (auth)", Object.keys(composeEnv(compose, "auth")));
  assertKnown(
    "gitlab-mcp-auth.service",
    Object.keys(unitEnv(await read("gitlab-mcp-auth.service"))),
  );
  // env.example feeds the unit and compose: a name there is the service's or compose's own.
  const forCompose = Object.keys(await filledEnvExample()).filter((name) => !KNOWN.has(name));
  for (const name of forCompose) assert.match(compose, new RegExp(`\\$\\{${name}\\b`), name);
});

Deno.test("deploy/: the values they set make a complete configuration", async () => {
  const example = await filledEnvExample();
  const compose = await read("compose.yaml");
  const fromCompose = Object.fromEntries(
    Object.entries(composeEnv(compose, "auth")).map(([name, value]) => [
      name,
      interpolate(value, example),
    ]),
  );
  // Compose hands the service the whole .env (env_file), then its own environment entries.
  const container = loadConfig({
    ...dockerfileEnv(await read("Dockerfile")),
    ...example,
    ...fromCompose,
  });
  assert.ok(oauthSettings(container), "the container is configured");
  assert.equal(container.baseUrl, `https://${example.AUTH_DOMAIN}`);
  // Compose trusts exactly Caddy's fixed address.
  const caddy = compose.match(/ipv4_address: (\S+)/)?.[1];
  assert.equal(fromCompose.TRUST_PROXY, `${caddy}/32`);
  const unit = loadConfig({ ...example, ...unitEnv(await read("gitlab-mcp-auth.service")) });
  assert.ok(oauthSettings(unit), "the unit is configured");
  assert.equal(listenHostname(unit), "127.0.0.1");
});

Deno.test("deploy/Dockerfile: pinned image, unprivileged, KV on the volume, liveness probe", async () => {
  const dockerfile = await read("Dockerfile");
  assert.match(dockerfile, /^FROM denoland\/deno:2\.9\.6$/m);
  assert.match(dockerfile, /^USER 1993:1993$/m, "the image's deno user, by number");
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
    const answer = await postMcpOverHttp(service.url, access_token, {
      method: "tools/call",
      params: { name: "whoami", arguments: {} },
    });
    assert.equal(answer.status, 200);
    const { result } = answer.body;
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

Deno.test("deploy/: every variable of env.example, and any the operator adds, reaches the service; the profile is strict", async () => {
  const example = await filledEnvExample();
  // What docs/operating.md invites an operator to add to the file.
  const file = {
    ...example,
    ALLOWED_REDIRECT_URIS: "https://claude.ai/api/mcp/auth_callback,http://127.0.0.1:*/*",
    GITLAB_SCOPES: "read_api read_user",
    REQUEST_BODY_TIMEOUT_MS: "5000",
  };
  const unitText = await read("gitlab-mcp-auth.service");
  const [unitFile] = unitEnvFiles(unitText);
  assert.ok(unitFile, "the unit reads an EnvironmentFile");
  assert.ok((await read("env.example")).includes(unitFile), `env.example names ${unitFile}`);
  const ways: [string, Record<string, string>, Record<string, string>][] = [
    ["compose.yaml", await containerEnv(file), await containerEnv(withoutProfile(file))],
    // systemd: the EnvironmentFile's lines win over Environment= lines.
    [
      "gitlab-mcp-auth.service",
      { ...unitEnv(unitText), ...file },
      { ...unitEnv(unitText), ...withoutProfile(file) },
    ],
  ];
  for (const [how, env, envWithoutProfile] of ways) {
    const missing = Object.keys(file).filter((name) => KNOWN.has(name) && !(name in env));
    assert.deepEqual(missing, [], `${how}: variables of the env file the service never sees`);
    const config = loadConfig(env);
    assert.equal(config.securityProfile, "strict", how);
    assert.deepEqual(config.allowedRedirectUris, file.ALLOWED_REDIRECT_URIS.split(","), how);
    assert.equal(config.upstream.scopes, "read_api read_user", how);
    assert.equal(config.requestBodyTimeoutMs, 5000, how);
    assert.equal(loadConfig(envWithoutProfile).securityProfile, "strict", `${how} sets it itself`);
  }
});

function withoutProfile(env: Record<string, string>): Record<string, string> {
  const { SECURITY_PROFILE: _, ...rest } = env;
  return rest;
}

/** `README "Heading"` and `docs/<page>.md "Heading"` in the comments of a file: where it sends a reader. */
function sectionReferences(text: string): { page: string; heading: string }[] {
  return [...text.matchAll(/\b(README(?:\.md)?|docs\/[a-z-]+\.md) "([^"\n]+)"/g)].map((match) => ({
    page: match[1] === "README" ? "README.md" : match[1],
    heading: match[2],
  }));
}

/** The headings of a markdown file, as written (code spans without their backticks). */
async function headings(page: string): Promise<Set<string>> {
  const text = await Deno.readTextFile(new URL(`../${page}`, DEPLOY));
  return new Set(
    [...text.matchAll(/^#{1,6} +(.+?) *$/gm)].map((match) => match[1].replace(/`/g, "")),
  );
}

async function filesUnder(dir: URL): Promise<URL[]> {
  const files: URL[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const url = new URL(entry.isDirectory ? `${entry.name}/` : entry.name, dir);
    if (entry.isDirectory) files.push(...await filesUnder(url));
    else files.push(url);
  }
  return files;
}

Deno.test("deploy/: every section a file's comments send the reader to exists on that page", async () => {
  const broken: string[] = [];
  let found = 0;
  for (const file of await filesUnder(DEPLOY)) {
    for (const { page, heading } of sectionReferences(await Deno.readTextFile(file))) {
      found++;
      if (!(await headings(page)).has(heading)) {
        broken.push(`${file.pathname.slice(DEPLOY.pathname.length)}: ${page} "${heading}"`);
      }
    }
  }
  assert.ok(found > 0, "the files name sections");
  assert.deepEqual(broken, [], "sections that are not where the files say");
});

Deno.test("deploy/compose.yaml: the PostgreSQL profile, set up as its comment says, starts without a warning", async () => {
  const compose = await read("compose.yaml");
  // The comment's URL, with the password it asks for.
  const documented = compose.match(/DATABASE_URL=(postgres:\/\/\S*?)<that password>(\S*)/);
  assert.ok(documented, "compose.yaml says which DATABASE_URL the profile takes");
  const password = "a-long-random-password";
  const file = {
    ...(await filledEnvExample()),
    POSTGRES_PASSWORD: password,
    DATABASE_URL: `${documented[1]}${password}${documented[2]}`,
    KV_PATH: "",
  };
  const config = loadConfig(await containerEnv(file));
  assert.equal(config.databaseUrl, file.DATABASE_URL);
  // The database is compose's own, on its network: a warning to add TLS it does not serve
  // would send the operator to a setting that stops the service.
  assert.deepEqual(weakSettings(config), []);
});

/** The unit's commented-out `LoadCredential=` recipe: credential id → source, and `NAME_FILE` → id. */
function credentialRecipe(
  unit: string,
): { loads: Map<string, string>; reads: Map<string, string> } {
  const loads = new Map(
    [...unit.matchAll(/^#LoadCredential=([\w.-]+):(\/\S+)$/gm)].map((
      match,
    ) => [match[1], match[2]]),
  );
  const reads = new Map(
    [...unit.matchAll(/^#Environment=([A-Z][A-Z0-9_]*_FILE)=%d\/([\w.-]+)$/gm)].map((
      match,
    ) => [match[1], match[2]]),
  );
  return { loads, reads };
}

/** The unit with its recipe uncommented, `%d` the credentials directory systemd made. */
function withCredentials(unit: string, credentialsDirectory?: string): string {
  const uncommented = unit.replace(
    /^#((?:LoadCredential|Environment)=.*)$/gm,
    (line, directive) =>
      /^(LoadCredential=|Environment=[A-Z0-9_]+_FILE=%d\/)/.test(directive) ? directive : line,
  );
  return credentialsDirectory === undefined
    ? uncommented
    : uncommented.replaceAll("%d", credentialsDirectory);
}

Deno.test("deploy/gitlab-mcp-auth.service: its LoadCredential= recipe hands the service its secrets through <NAME>_FILE", async () => {
  const unit = await read("gitlab-mcp-auth.service");
  const { loads, reads } = credentialRecipe(unit);
  assert.equal(reads.get("JWT_SECRET_FILE"), "jwt-secret", "the recipe covers JWT_SECRET");
  for (const [name, id] of reads) {
    assert.ok(KNOWN.has(name) && KNOWN.has(name.slice(0, -"_FILE".length)), `${name} is read`);
    // Root-only, beside the env file; never the env file itself.
    assert.match(loads.get(id) ?? "", /^\/etc\/gitlab-mcp-auth\/[\w.-]+$/, `${id} is loaded`);
    assert.notEqual(loads.get(id), unitEnvFiles(unit)[0]);
  }
  // The other secrets the comment sends to the same recipe are secrets the service reads so.
  const others = unit.match(/^# DATABASE_URL, .*\n# JWT_SECRET_PREVIOUS /m)?.[0] ?? "";
  const named = [...others.matchAll(/\b([A-Z][A-Z0-9_]+)\b/g)].map((match) => match[1]);
  assert.ok(named.length >= 6, others);
  for (const name of named) assert.ok(KNOWN.has(`${name}_FILE`), `${name}_FILE`);

  // What systemd does at start: each credential copied into the service's own directory.
  const credentials = await Deno.makeTempDir({ prefix: "credentials-" });
  const dir = await Deno.makeTempDir({ prefix: "unit-" });
  try {
    await Deno.writeTextFile(`${credentials}/jwt-secret`, `${TEST_SECRET}\n`);
    const unitText = withCredentials(unit, credentials);
    // The env file as the recipe says: `JWT_SECRET=` left empty, its lines winning.
    const file = await filledEnvExample();
    const env: Record<string, string> = { ...unitEnv(unitText), ...file, JWT_SECRET: "" };
    assert.equal(env.JWT_SECRET_FILE, `${credentials}/jwt-secret`);
    assert.equal(loadConfig(env).jwtSecret, TEST_SECRET);
    // Left set in the env file too: start-up stops, naming both.
    assert.throws(() => loadConfig({ ...env, JWT_SECRET: TEST_SECRET }), /JWT_SECRET_FILE: is set/);
    // The service started with what the recipe gives it signs with the credential's secret.
    const started = await spawnWithGitLab("unit-app", {
      JWT_SECRET: "",
      JWT_SECRET_FILE: env.JWT_SECRET_FILE,
      KV_PATH: `${dir}/kv.sqlite`,
    });
    try {
      const { access_token } = await signInOverHttp(started.service.url, started.gitlab);
      await jwtVerify(access_token, new TextEncoder().encode(TEST_SECRET));
    } finally {
      await started.close();
    }
  } finally {
    await Deno.remove(credentials, { recursive: true });
    await Deno.remove(dir, { recursive: true });
  }
});

const systemdAnalyze = "/usr/bin/systemd-analyze";

Deno.test({
  name:
    "deploy/gitlab-mcp-auth.service: with its LoadCredential= recipe uncommented, systemd-analyze verify knows every line",
  ignore: !(await Deno.stat(systemdAnalyze).then(() => true, () => false)),
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "unit-" });
    try {
      const unit = withCredentials(await read("gitlab-mcp-auth.service"))
        .replace(/^ExecStart=\S+/m, `ExecStart=${Deno.execPath()}`);
      assert.match(unit, /^LoadCredential=jwt-secret:/m);
      await Deno.writeTextFile(`${dir}/gitlab-mcp-auth.service`, unit);
      const { code, stdout, stderr } = await new Deno.Command(systemdAnalyze, {
        args: ["verify", `${dir}/gitlab-mcp-auth.service`],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const said = new TextDecoder().decode(stdout) + new TextDecoder().decode(stderr);
      assert.equal(code, 0, said);
      assert.equal(said.trim(), "", "no unknown or misspelled directive");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
