/**
 * The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, its server
 * scenarios) against the reference "everything" MCP server (npm
 * `@modelcontextprotocol/server-everything`, Streamable HTTP), run twice: directly, and through
 * the gateway with a real access token. The two runs must agree check by check. The suite's
 * CLI cannot add request headers, so a loopback forwarder in front of the in-process app adds
 * `Authorization: Bearer <token>`. tests/conformance_baseline.json names the scenarios the
 * reference server fails directly, each with why; the direct run must fail exactly those.
 *
 * Both packages run as subprocesses of this Deno (pinned by deno.json and deno.lock).
 */

import assert from "node:assert/strict";
import { issueTokens, makeTestApp, TEST_BASE, type TestApp } from "./_helpers.ts";

const ROOT = new URL("../", import.meta.url);
const CONFORMANCE = "npm:@modelcontextprotocol/conformance@0.1.16";
const EVERYTHING = "npm:@modelcontextprotocol/server-everything@2026.8.31";
/** The first run may install the packages; later ones take seconds. */
const START_MS = 120_000;
const SUITE_MS = 180_000;

/** One check of one scenario, as compared between the runs. */
interface Check {
  id: string;
  status: string;
  errorMessage?: string;
}

/** Scenario name → its checks. */
type Results = Map<string, Check[]>;

function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function freeLoopbackPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** The reference server as a child process, once it says it listens. */
interface Everything {
  url: string;
  close(): Promise<void>;
}

async function startEverything(): Promise<Everything> {
  const port = freeLoopbackPort();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--quiet", EVERYTHING, "streamableHttp"],
    cwd: ROOT,
    env: { PORT: String(port), NO_COLOR: "1" },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const close = async () => {
    try {
      child.kill("SIGTERM");
    } catch {
      // already exited
    }
    await child.status;
  };
  try {
    await within(waitForLine(child.stderr, /listening on port/i), START_MS, "server-everything");
  } catch (error) {
    await close();
    throw error;
  }
  return { url: `http://127.0.0.1:${port}/mcp`, close };
}

/** Reads `stream` until a line matches, then keeps draining it so the child never blocks. */
async function waitForLine(stream: ReadableStream<Uint8Array>, pattern: RegExp): Promise<void> {
  const lines = stream.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (true) {
    const { value, done } = await lines.read();
    if (done) throw new Error(`server-everything exited before listening:\n${seen}`);
    seen += value;
    if (pattern.test(seen)) break;
  }
  (async () => {
    while (!(await lines.read()).done) { /* drain */ }
  })().catch(() => {});
}

/**
 * A loopback server that hands every request to the in-process app as `{TEST_BASE}/mcp`,
 * adding the access token the conformance CLI has no option to send.
 */
function startTokenForwarder(t: TestApp, accessToken: string) {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    const headers = new Headers(request.headers);
    headers.set("Authorization", `Bearer ${accessToken}`);
    const { pathname, search } = new URL(request.url);
    return t.app(
      new Request(`${TEST_BASE}${pathname}${search}`, {
        method: request.method,
        headers,
        body: request.body,
        signal: request.signal,
      }),
    );
  });
  return { url: `http://127.0.0.1:${server.addr.port}/mcp`, close: () => server.shutdown() };
}

/** Runs every active server scenario against `url`; returns each scenario's checks. */
async function runSuite(url: string): Promise<Results> {
  const outputDir = await Deno.makeTempDir({ prefix: "mcp-conformance-" });
  try {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--quiet", CONFORMANCE, "server", "--url", url, "-o", outputDir],
      cwd: ROOT,
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), SUITE_MS);
    // Exit 1 means "some scenario failed", which the comparison judges; no results is an error.
    const output = await child.output().finally(() => clearTimeout(timer));
    const results = await readResults(outputDir, url);
    if (results.size === 0) {
      const decoder = new TextDecoder();
      throw new Error(
        `the conformance suite wrote no results (exit ${output.code}):\n` +
          decoder.decode(output.stdout) + decoder.decode(output.stderr),
      );
    }
    return results;
  } finally {
    await Deno.remove(outputDir, { recursive: true });
  }
}

/** `server-<scenario>-<timestamp>/checks.json` → scenario → checks, URLs made comparable. */
async function readResults(outputDir: string, url: string): Promise<Results> {
  const results: Results = new Map();
  for await (const entry of Deno.readDir(outputDir)) {
    const scenario = entry.name.replace(/^server-/, "").replace(/-\d{4}-\d\d-\d\dT[\d-]+Z$/, "");
    const raw: Check[] = JSON.parse(
      await Deno.readTextFile(`${outputDir}/${entry.name}/checks.json`),
    );
    results.set(
      scenario,
      raw.map(({ id, status, errorMessage }) => ({
        id,
        status,
        ...(errorMessage ? { errorMessage: errorMessage.replaceAll(url, "<url>") } : {}),
      })),
    );
  }
  return results;
}

function failedScenarios(results: Results): string[] {
  return [...results]
    .filter(([, checks]) => checks.some(({ status }) => status === "FAILURE"))
    .map(([scenario]) => scenario)
    .sort();
}

async function gatewayApp(upstreamUrl: string): Promise<{ t: TestApp; accessToken: string }> {
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: upstreamUrl } });
  const { access_token } = await issueTokens(t);
  return { t, accessToken: access_token };
}

Deno.test({
  name:
    "MCP conformance suite: the reference everything server gives the same results through the gateway as directly",
  // The suite's runner and the reference server are Node programs in child processes.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const baseline: Record<string, string> = JSON.parse(
      await Deno.readTextFile(new URL("conformance_baseline.json", import.meta.url)),
    );
    const everything = await startEverything();
    const { t: app, accessToken } = await gatewayApp(everything.url);
    const forwarder = startTokenForwarder(app, accessToken);
    try {
      const direct = await runSuite(everything.url);
      const gateway = await runSuite(forwarder.url);

      await t.step("the direct run fails exactly the baseline's scenarios", () => {
        assert.deepEqual(failedScenarios(direct), Object.keys(baseline).sort());
      });
      await t.step("the same scenarios ran both ways", () => {
        assert.deepEqual([...gateway.keys()].sort(), [...direct.keys()].sort());
      });
      for (const [scenario, checks] of [...direct].sort(([a], [b]) => a.localeCompare(b))) {
        await t.step(`${scenario}: the same checks and outcomes through the gateway`, () => {
          assert.deepEqual(gateway.get(scenario), checks);
        });
      }
    } finally {
      await forwarder.close();
      app.close();
      await everything.close();
    }
  },
});
