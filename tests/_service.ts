/**
 * Runs the real service (`main.ts`) as a child process on a random loopback port, the way a
 * user starts it, and collects its log lines. Also: the client's side of a sign-in over real
 * HTTP against such a service and the simulated GitLab.
 */

import assert from "node:assert/strict";
import { type SimulatedGitLab, startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { authorizeQuery, flowDataFromPage, PKCE, TEST_REDIRECT, TEST_SECRET } from "./_helpers.ts";

/** A service process under test. */
export interface ServiceProcess {
  /** e.g. `http://127.0.0.1:41234` */
  url: string;
  /** Every line it printed so far (stdout and stderr). */
  logs: string[];
  /** SIGTERM, then waits for the exit; returns the exit code. */
  stop(): Promise<number>;
}

const MAIN = new URL("../main.ts", import.meta.url).pathname;
/** Longer than the service's own 10 s bound on finishing requests in flight. */
const STOP_GRACE_MS = 30_000;
/** The permissions `deno task start` grants. */
const PERMISSIONS = ["--allow-net", "--allow-env", "--allow-read", "--allow-write"];

/** `deno task start`'s way: `deno run main.ts start`. */
const RUN_START_ARGS = ["run", ...PERMISSIONS, MAIN, "start"];

/** `deno serve` on a random loopback port, with `flags` (e.g. `--parallel`), serving main.ts. */
export function denoServeArgs(flags: string[] = []): string[] {
  return ["serve", ...PERMISSIONS, "--host", "127.0.0.1", "--port", "0", ...flags, MAIN];
}

/**
 * Starts `deno run main.ts start` (or Deno with `args`) with `env` (PORT=0 and HOST=127.0.0.1
 * unless given).
 */
export async function spawnService(
  env: Record<string, string>,
  args: string[] = RUN_START_ARGS,
): Promise<ServiceProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args,
    env: { ...inheritedEnv(), PORT: "0", HOST: "127.0.0.1", ...env },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const logs: string[] = [];
  const { promise: listening, resolve, reject } = Promise.withResolvers<string>();
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    let buffered = "";
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      buffered += text;
      const lines = buffered.split("\n");
      buffered = lines.pop() ?? "";
      for (const line of lines) {
        logs.push(line);
        const url = line.includes('"listening"') ? JSON.parse(line).url : undefined;
        if (url) resolve(url);
      }
    }
    if (buffered) logs.push(buffered);
  };
  const readers = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const status = child.status.then((s) => {
    reject(new Error(`service exited with ${s.code} before listening:\n${logs.join("\n")}`));
    return s;
  });
  const url = await listening;
  return {
    url,
    logs,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch {
        // already exited
      }
      // A lost SIGTERM must fail the test (exit code 137), not hang the whole run.
      const kill = setTimeout(() => {
        logs.push(`no exit ${STOP_GRACE_MS} ms after SIGTERM: SIGKILL`);
        child.kill("SIGKILL");
      }, STOP_GRACE_MS);
      const { code } = await status;
      clearTimeout(kill);
      await readers;
      return code;
    },
  };
}

/** Resolves once `condition` holds (checked every 10 ms); throws after `timeoutMs`. */
export async function waitFor(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A simulated GitLab and a service using it, stopped together. */
export interface ServiceWithGitLab {
  gitlab: SimulatedGitLab;
  service: ServiceProcess;
  /** Stops the service, then closes GitLab. */
  close(): Promise<void>;
}

/**
 * Starts the simulated GitLab and the service aimed at it, configured (GitLab application
 * `clientId`, `TEST_SECRET`, in-memory KV) with `env` on top; `args` as for spawnService.
 */
export async function spawnWithGitLab(
  clientId: string,
  env: Record<string, string> = {},
  args: string[] = RUN_START_ARGS,
): Promise<ServiceWithGitLab> {
  const gitlab = startSimulatedGitLab();
  let service: ServiceProcess;
  try {
    service = await spawnService({
      GITLAB_URL: gitlab.url.href,
      GITLAB_CLIENT_ID: clientId,
      JWT_SECRET: TEST_SECRET,
      KV_PATH: ":memory:",
      ...env,
    }, args);
  } catch (error) {
    await gitlab.close();
    throw error;
  }
  return {
    gitlab,
    service,
    async close() {
      await service.stop();
      await gitlab.close();
    },
  };
}

/** What the child needs to find Deno's cache; nothing of the parent's configuration. */
function inheritedEnv(): Record<string, string> {
  const keep: Record<string, string> = {};
  for (const name of ["HOME", "PATH", "DENO_DIR", "XDG_CACHE_HOME", "NPM_CONFIG_REGISTRY"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) keep[name] = value;
  }
  return keep;
}

// ---- over HTTP -------------------------------------------------------------------------------

// deno-lint-ignore no-explicit-any -- a JSON body, read field by field by the assertions
export type Json = Record<string, any>;

/** A status and the parsed JSON body. */
export interface HttpResult {
  status: number;
  body: Json;
}

/** Fetches `url` and parses the JSON body; a body that is not JSON fails with what it was. */
export async function fetchJson(url: string, init?: RequestInit): Promise<HttpResult> {
  const response = await fetch(url, init);
  const text = await response.text();
  let body: Json;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(
      `${url} answered ${response.status} with a non-JSON body: ${text.slice(0, 200)}`,
    );
  }
  return { status: response.status, body };
}

/** POST `{serviceUrl}/token`, form-encoded. */
export function postToken(serviceUrl: string, form: Record<string, string>): Promise<HttpResult> {
  return fetchJson(`${serviceUrl}/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form),
  });
}

/** The authorization_code grant for `code` with the PKCE verifier. */
export function exchangeOverHttp(
  serviceUrl: string,
  code: string,
  redirectUri = TEST_REDIRECT,
): Promise<HttpResult> {
  return postToken(serviceUrl, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: redirectUri,
  });
}

/** GET `{serviceUrl}/oauth/poll` once. */
export function pollOverHttp(serviceUrl: string, flowState: string): Promise<HttpResult> {
  return fetchJson(`${serviceUrl}/oauth/poll?flow_state=${encodeURIComponent(flowState)}`);
}

/** Loads a device page (asserting 200) and returns the values it hands its script. */
export async function fetchFlowData(
  url: string | URL,
): Promise<ReturnType<typeof flowDataFromPage>> {
  const response = await fetch(url);
  const html = await response.text();
  assert.equal(response.status, 200, html);
  return flowDataFromPage(html);
}

/** GET `{serviceUrl}/authorize?{authorizeQuery(overrides)}`; returns the page's flow data. */
export function authorizeOverHttp(
  serviceUrl: string,
  overrides: Record<string, string | null> = {},
): Promise<ReturnType<typeof flowDataFromPage>> {
  return fetchFlowData(`${serviceUrl}/authorize?${authorizeQuery(overrides)}`);
}

/** Asserts a poll answered 200 `complete`. */
export function assertFlowComplete(done: HttpResult): void {
  assert.equal(done.status, 200, JSON.stringify(done.body));
  assert.equal(done.body.status, "complete", JSON.stringify(done.body));
}

/**
 * What the device page's script does, without a browser: loads the page at `url`, approves
 * the newest device code at GitLab, polls once at the page's poll URL and builds the redirect
 * exactly as the script does (code, state, then iss). Returns it and the poll body.
 */
export async function followPageWithoutBrowser(
  url: string | URL,
  gitlab: SimulatedGitLab,
): Promise<{ callback: URL; done: Json }> {
  const data = await fetchFlowData(url);
  gitlab.approve(gitlab.lastUserCode()!);
  const polled = await fetchJson(
    `${data.pollUrl}?flow_state=${encodeURIComponent(data.flowState)}`,
  );
  assertFlowComplete(polled);
  const done = polled.body;
  const callback = new URL(done.redirect_uri);
  callback.searchParams.set("code", done.code);
  if (typeof done.state === "string") callback.searchParams.set("state", done.state);
  if (typeof data.issuer === "string") callback.searchParams.set("iss", data.issuer);
  return { callback, done };
}

/** How `signInOverHttp` asks for authorization. */
export interface SignInOptions {
  /** Default `TEST_REDIRECT`. */
  redirectUri?: string;
  /** Default `authorizeQuery`'s. */
  clientId?: string;
  /** Default `authorizeQuery`'s. */
  state?: string;
  /** Poll once before approving at GitLab and expect `pending`. */
  pollBeforeApproval?: boolean;
}

/**
 * A whole sign-in over real HTTP: authorize at the service, approve at the simulated GitLab,
 * poll until complete and exchange the code. Returns the token response body.
 */
export async function signInOverHttp(
  serviceUrl: string,
  gitlab: SimulatedGitLab,
  options: SignInOptions = {},
): Promise<Json> {
  const redirectUri = options.redirectUri ?? TEST_REDIRECT;
  const overrides: Record<string, string> = { redirect_uri: redirectUri };
  if (options.clientId !== undefined) overrides.client_id = options.clientId;
  if (options.state !== undefined) overrides.state = options.state;
  const { flowState } = await authorizeOverHttp(serviceUrl, overrides);
  if (options.pollBeforeApproval) {
    assert.deepEqual((await pollOverHttp(serviceUrl, flowState)).body, { status: "pending" });
  }
  gitlab.approve(gitlab.lastUserCode()!);
  const done = await pollOverHttp(serviceUrl, flowState);
  assertFlowComplete(done);
  const exchanged = await exchangeOverHttp(serviceUrl, done.body.code, redirectUri);
  assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
  return exchanged.body;
}
