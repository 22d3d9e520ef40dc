/**
 * Runs the real service (`main.ts`) as a child process on a random loopback port, the way a
 * user starts it, and collects its log lines. Also: the client's side of a sign-in over real
 * HTTP against such a service and the simulated GitLab.
 */

import assert from "node:assert/strict";
import {
  type SimulatedGitLab,
  type SimulatedGitLabOptions,
  startSimulatedGitLab,
} from "../dev/simulated_gitlab.ts";
import {
  authorizeQuery,
  consentFormOf,
  CookieJar,
  flowDataFromPage,
  type Json,
  PKCE,
  TEST_REDIRECT,
  TEST_SECRET,
} from "./_helpers.ts";

/** A service process under test. */
export interface ServiceProcess {
  /** e.g. `http://127.0.0.1:41234` */
  url: string;
  /** The service's `listening` log line (its `gitlab` field names the GitLab it uses). */
  listening: Json;
  /** Every line it printed so far (stdout and stderr). */
  logs: string[];
  /** Sends `signal` (SIGTERM unless given), then waits for the exit; returns the exit code. */
  stop(signal?: Deno.Signal): Promise<number>;
  /** Sends `signal` and returns at once (SIGHUP: reload). */
  signal(signal: Deno.Signal): void;
}

const MAIN = new URL("../main.ts", import.meta.url).pathname;
/** Longer than the service's own 10 s bound on finishing requests in flight. */
const STOP_GRACE_MS = 30_000;
/** The permissions `deno task start` grants. */
const PERMISSIONS = ["--allow-net", "--allow-env", "--allow-read", "--allow-write"];

/** `deno run` with `deno task start`'s permissions: `entry`, then its arguments. */
export function denoRunArgs(entry: string, entryArgs: string[] = []): string[] {
  return ["run", ...PERMISSIONS, entry, ...entryArgs];
}

/** dev/demo.ts and the configuration `deno task demo` runs it with (its own imports and lock). */
export const DEMO = new URL("../dev/demo.ts", import.meta.url).pathname;
const DEMO_CONFIG = new URL("../dev/deno.json", import.meta.url).pathname;

/** `deno task demo`'s way: `deno run --config dev/deno.json dev/demo.ts`. */
export function demoRunArgs(permissions: string[] = PERMISSIONS): string[] {
  return ["run", "--config", DEMO_CONFIG, ...permissions, DEMO];
}

/** `deno task start`'s way: `deno run main.ts start`. */
const RUN_START_ARGS = denoRunArgs(MAIN, ["start"]);

/** `deno serve` on a random loopback port, with `flags` (e.g. `--parallel`), serving main.ts. */
export function denoServeArgs(flags: string[] = []): string[] {
  return ["serve", ...PERMISSIONS, "--host", "127.0.0.1", "--port", "0", ...flags, MAIN];
}

/**
 * Starts `deno run main.ts start` (or Deno with `args`, e.g. `denoRunArgs(demo)` for another
 * entry that starts the service) with `env` (PORT=0 and HOST=127.0.0.1 unless given). With
 * `shellSetup`, /bin/sh runs it first and then execs Deno in its place (`ulimit`, `trap`: limits
 * and ignored signals pass on to Deno).
 */
export async function spawnService(
  env: Record<string, string>,
  args: string[] = RUN_START_ARGS,
  { shellSetup, timeoutMs }: { shellSetup?: string; timeoutMs?: number } = {},
): Promise<ServiceProcess> {
  const [program, programArgs] = shellSetup === undefined
    ? [Deno.execPath(), args]
    : ["/bin/sh", ["-c", `${shellSetup}\nexec "$0" "$@"`, Deno.execPath(), ...args]];
  const child = new Deno.Command(program, {
    args: programArgs,
    env: { ...inheritedEnv(), PORT: "0", HOST: "127.0.0.1", ...withBaseUrlForRedirect(env) },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const logs: string[] = [];
  const { promise: listening, resolve, reject } = Promise.withResolvers<Json>();
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    let buffered = "";
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      buffered += text;
      const lines = buffered.split("\n");
      buffered = lines.pop() ?? "";
      for (const line of lines) {
        logs.push(line);
        const parsed = line.includes('"listening"') ? JSON.parse(line) : undefined;
        if (parsed?.url) resolve(parsed);
      }
    }
    if (buffered) logs.push(buffered);
  };
  const readers = Promise.all([collect(child.stdout), collect(child.stderr)]);
  // A start-up that hangs (reading a FIFO, say) fails the test rather than the whole run.
  const hung = timeoutMs === undefined ? undefined : setTimeout(() => {
    logs.push(`neither listening nor exited ${timeoutMs} ms after it started: SIGKILL`);
    child.kill("SIGKILL");
  }, timeoutMs);
  const status = child.status.then(async (s) => {
    // The exit can be seen before the last lines are read: the error names them.
    await readers;
    reject(new Error(`service exited with ${s.code} before listening:\n${logs.join("\n")}`));
    return s;
  });
  const started = await listening.finally(() => clearTimeout(hung));
  return {
    url: started.url,
    listening: started,
    logs,
    signal: (signal) => child.kill(signal),
    async stop(signal: Deno.Signal = "SIGTERM") {
      try {
        child.kill(signal);
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

/** What a command-line run printed, and how it exited. */
export interface CommandRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `main.ts admin …args` to completion with `env`, as an operator would. */
export async function runAdminCli(
  args: string[],
  env: Record<string, string>,
  { timeoutMs }: { timeoutMs?: number } = {},
): Promise<CommandRun> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: denoRunArgs(MAIN, ["admin", ...args]),
    env: { ...inheritedEnv(), ...env },
    clearEnv: true,
    stdin: "null",
    // Past `timeoutMs` it is sent SIGTERM: a run that hangs fails with that exit code.
    ...(timeoutMs === undefined ? {} : { signal: AbortSignal.timeout(timeoutMs) }),
  }).output();
  const decoder = new TextDecoder();
  return { code, stdout: decoder.decode(stdout), stderr: decoder.decode(stderr) };
}

/** Runs `fn` with a simulated GitLab started with `options`, and closes it afterwards. */
export async function withGitLab(
  fn: (gitlab: SimulatedGitLab) => Promise<void>,
  options: SimulatedGitLabOptions = {},
): Promise<void> {
  const gitlab = startSimulatedGitLab(options);
  try {
    await fn(gitlab);
  } finally {
    await gitlab.close();
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

/**
 * The redirect sign-in needs BASE_URL, known before the child listens: a free loopback port is
 * picked here and handed to the child as PORT too.
 */
function withBaseUrlForRedirect(env: Record<string, string>): Record<string, string> {
  if (env.GITLAB_SIGN_IN !== "redirect" || env.BASE_URL || (env.PORT && env.PORT !== "0")) {
    return env;
  }
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = String(listener.addr.port);
  listener.close();
  return { ...env, PORT: port, BASE_URL: `http://127.0.0.1:${port}` };
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

/** A JSON body, read field by field by the assertions. */
export type { Json };

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

/**
 * A POST of one JSON-RPC `message` (id 1; a `ping` unless told) as a Streamable HTTP client
 * sends it, with `accessToken` as its bearer token.
 */
export function mcpPostInit(
  accessToken: string,
  message: Record<string, unknown> = { method: "ping" },
): RequestInit {
  return {
    method: "POST",
    headers: {
      Authorization: `Bearer ${accessToken}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, ...message }),
  };
}

/** POST one JSON-RPC `message` to `{serviceUrl}/mcp` as a Streamable HTTP client does. */
export function postMcpOverHttp(
  serviceUrl: string,
  accessToken: string,
  message: Record<string, unknown>,
  path = "/mcp",
): Promise<HttpResult> {
  return fetchJson(`${serviceUrl}${path}`, mcpPostInit(accessToken, message));
}

/** POST `{serviceUrl}/token`, form-encoded. */
export function postToken(serviceUrl: string, form: Record<string, string>): Promise<HttpResult> {
  return fetchJson(`${serviceUrl}/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form),
  });
}

/** The refresh_token grant. */
export function refreshOverHttp(serviceUrl: string, refreshToken: string): Promise<HttpResult> {
  return postToken(serviceUrl, { grant_type: "refresh_token", refresh_token: refreshToken });
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

/** Loads a device page (asserting 200): its HTML and the values it hands its script. */
async function fetchDevicePage(
  url: string | URL,
): Promise<{ html: string; data: ReturnType<typeof flowDataFromPage> }> {
  const response = await fetch(url);
  const html = await response.text();
  assert.equal(response.status, 200, html);
  return { html, data: flowDataFromPage(html) };
}

/** Loads a device page (asserting 200) and returns the values it hands its script. */
export async function fetchFlowData(
  url: string | URL,
): Promise<ReturnType<typeof flowDataFromPage>> {
  return (await fetchDevicePage(url)).data;
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

/** Approves `userCode` on the simulated GitLab's verification page over HTTP, as a person does. */
export async function approveOverHttp(gitlabUrl: URL, userCode: string): Promise<void> {
  const response = await fetch(new URL("/oauth/device", gitlabUrl), {
    method: "POST",
    body: new URLSearchParams({ user_code: userCode, action: "approve" }),
  });
  const page = await response.text();
  assert.equal(response.status, 200, page);
}

/**
 * What the device page's script does, without a browser: loads the page at `url`, approves
 * its user code at GitLab (through the in-process simulation's control, or over HTTP when
 * given the simulated GitLab's URL only, e.g. the demo's), polls once at the page's poll URL
 * and builds the redirect exactly as the script does (code, state, then iss). Returns it and
 * the poll body.
 */
export async function followPageWithoutBrowser(
  url: string | URL,
  gitlab: SimulatedGitLab | URL,
): Promise<{ callback: URL; done: Json }> {
  const { html, data } = await fetchDevicePage(url);
  const userCode = html.match(/<p id="user-code"[^>]*>([^<]+)<\/p>/)?.[1].trim() ?? "";
  if (gitlab instanceof URL) await approveOverHttp(gitlab, userCode);
  else gitlab.approve(userCode);
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
  /** The GitLab account that approves; default the simulated GitLab's first. */
  userId?: number;
  /** The MCP server the token is for (RFC 8707); default the service's own `/mcp`. */
  resource?: string;
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
  if (options.resource !== undefined) overrides.resource = options.resource;
  const { flowState } = await authorizeOverHttp(serviceUrl, overrides);
  if (options.pollBeforeApproval) {
    assert.deepEqual((await pollOverHttp(serviceUrl, flowState)).body, { status: "pending" });
  }
  gitlab.approve(gitlab.lastUserCode()!, options.userId);
  const done = await pollOverHttp(serviceUrl, flowState);
  assertFlowComplete(done);
  const exchanged = await exchangeOverHttp(serviceUrl, done.body.code, redirectUri);
  assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
  return exchanged.body;
}

/** A response read off the wire. */
export interface RawResponse {
  status: number;
  headers: Headers;
  body: string;
}

/**
 * Sends `head` (the request line and header lines, without the blank line) and `body` over a
 * plain TCP connection to `serviceUrl` and reads the answer: for what fetch refuses to send, such
 * as a `Host` header of the test's choosing.
 */
export async function rawRequest(
  serviceUrl: string,
  head: string[],
  body = "",
): Promise<RawResponse> {
  const { hostname, port } = new URL(serviceUrl);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  try {
    const request = [...head, "Connection: close", "", body].join("\r\n");
    await conn.write(new TextEncoder().encode(request));
    const raw = await new Response(conn.readable).text();
    const [headText, ...bodyParts] = raw.split("\r\n\r\n");
    const [statusLine, ...headerLines] = headText.split("\r\n");
    const headers = new Headers();
    for (const line of headerLines) {
      const colon = line.indexOf(":");
      headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
    return { status: Number(statusLine.split(" ")[1]), headers, body: bodyParts.join("\r\n\r\n") };
  } finally {
    try {
      conn.close();
    } catch {
      // the readable side closed it already
    }
  }
}

/**
 * What a browser does in the redirect sign-in (GITLAB_SIGN_IN=redirect), without one: loads
 * `url` (the service's /authorize) holding `jar`'s cookies, clicks "Continue with GitLab" on the
 * consent page (unless the consent is remembered), approves (or denies) on the simulated GitLab's
 * page and follows GitLab's redirect to the service's callback. Returns where the callback sends
 * the browser: the client's redirect URI with code (or error), state and iss.
 */
export async function redirectSignInWithoutBrowser(
  url: string | URL,
  jar = new CookieJar(),
  decision: "approve" | "deny" = "approve",
): Promise<URL> {
  const visit = async (target: string | URL, init: RequestInit = {}) => {
    const response = await fetch(target, {
      ...init,
      headers: { ...jar.headers(), ...init.headers },
      redirect: "manual",
    });
    jar.store(response);
    return response;
  };
  let answer = await visit(url);
  if (answer.status === 200) {
    const form = consentFormOf(await answer.text());
    answer = await visit(new URL("/oauth/consent", url), {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ ...form, action: "continue" }),
    });
  }
  // GitLab is another site: the service's cookies stay in the jar.
  const back = await decideAtGitLab(new URL(locationOf(answer)), decision);
  return new URL(locationOf(await visit(back)));
}

/**
 * A person's answer on the simulated GitLab's authorization page at `url`: loads the page,
 * clicks Approve or Deny, and returns where GitLab sends the browser.
 */
export async function decideAtGitLab(url: URL, decision: "approve" | "deny"): Promise<string> {
  const page = await fetch(url);
  assert.equal(page.status, 200, await page.text());
  const answer = await fetch(new URL("/oauth/authorize", url), {
    method: "POST",
    body: new URLSearchParams([...url.searchParams, ["action", decision]]),
    redirect: "manual",
  });
  return locationOf(answer);
}

/** The `Location` of a 302, asserting it is one. */
function locationOf(response: Response): string {
  assert.equal(response.status, 302, `expected a redirect, got ${response.status}`);
  const location = response.headers.get("location");
  assert.ok(location);
  return location;
}
