/**
 * The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, its server
 * scenarios) against our "everything" MCP server (dev/conformance_server.ts: every fixture the
 * scenarios call by name, written from their checks), run three times: directly, through the
 * gateway at `/mcp`, and through it at `/mcp/fixtures` (a server of MCP_SERVERS_FILE, issue 35),
 * each with a real access token for that server. The gateway runs must agree with the direct
 * one check by check. The suite's CLI
 * cannot add request headers, so a loopback forwarder in front of the in-process app adds
 * `Authorization: Bearer <token>`. tests/conformance_baseline.json names the scenarios the
 * fixture server fails directly, each with why; the direct run must fail exactly those.
 *
 * The suite runs as a subprocess of this Deno (pinned by deno.json and deno.lock).
 */

import assert from "node:assert/strict";
import { startConformanceServer } from "../dev/conformance_server.ts";
import { startModernConformanceServer } from "../dev/conformance_server_v2.ts";
import { exchange, issueCode, makeTestApp, TEST_BASE, type TestApp } from "./_helpers.ts";

const ROOT = new URL("../", import.meta.url);
/** Scenarios of 2025-03-26 to 2025-11-25 (SDK v1 era). */
const CONFORMANCE = "npm:@modelcontextprotocol/conformance@0.1.16";
/** Its successor, whose `--requirements 2026-07-28` runs what that revision requires. */
const CONFORMANCE_2026 = "npm:@modelcontextprotocol/conformance@0.2.0-alpha.12";
/** The first run may download the suite; later runs take about ten seconds. */
const SUITE_MS = 180_000;

/** One check of one scenario, as compared between the runs. */
interface Check {
  id: string;
  status: string;
  errorMessage?: string;
}

/** Scenario name → its checks. */
type Results = Map<string, Check[]>;

/** The name the fixture server has in the servers file, so it is also at `/mcp/fixtures`. */
const NAMED = "fixtures";

/**
 * A loopback server that hands every request to the in-process app at `path`, adding the access
 * token the conformance CLI has no option to send.
 */
function startTokenForwarder(t: TestApp, accessToken: string, path: string) {
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
  return { url: `http://127.0.0.1:${server.addr.port}${path}`, close: () => server.shutdown() };
}

/** Which suite to run, and how. */
interface Suite {
  specifier: string;
  args: string[];
}

const SUITE_2025: Suite = { specifier: CONFORMANCE, args: [] };
const SUITE_2026: Suite = {
  specifier: CONFORMANCE_2026,
  args: ["--requirements", "2026-07-28"],
};

/** Scenarios the suite runs and reports but does not score (extensions, pending ones). */
function unscoredScenarios(stdout: string): Set<string> {
  const listed = stdout.matchAll(/^\s+[✓✗] (\S+) \((?:extension|pending|added-after-release)\)$/gm);
  return new Set([...listed].map(([, scenario]) => scenario.replace(/^server-/, "")));
}

/** Runs the suite's scored server scenarios against `url`; returns each scenario's checks. */
async function runSuite(suite: Suite, url: string): Promise<Results> {
  const outputDir = await Deno.makeTempDir({ prefix: "mcp-conformance-" });
  try {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        // The suites are test packages: they are in the tests' lock, never in the service's.
        "--config",
        "tests/deno.json",
        "-A",
        "--quiet",
        suite.specifier,
        "server",
        "--url",
        url,
        "-o",
        outputDir,
        ...suite.args,
      ],
      cwd: ROOT,
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), SUITE_MS);
    // Exit 1 means "some scenario failed", which the comparison judges; no results is an error.
    const output = await child.output().finally(() => clearTimeout(timer));
    const decoder = new TextDecoder();
    const unscored = unscoredScenarios(decoder.decode(output.stdout));
    const results = await readResults(outputDir, url, unscored);
    if (results.size === 0) {
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
async function readResults(
  outputDir: string,
  url: string,
  skipped: Set<string>,
): Promise<Results> {
  const results: Results = new Map();
  for await (const entry of Deno.readDir(outputDir)) {
    const scenario = entry.name.replace(/^server-/, "").replace(/-\d{4}-\d\d-\d\dT[\d-]+Z$/, "");
    if (skipped.has(scenario)) continue;
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

/** The gateway in front of the fixture server at `/mcp` and at `/mcp/fixtures`. */
interface GatewayRuns {
  t: TestApp;
  /** The forwarders' paths and the access token each sends. */
  paths: { path: string; accessToken: string }[];
  close(): Promise<void>;
}

async function gatewayApp(upstreamUrl: string): Promise<GatewayRuns> {
  const dir = await Deno.makeTempDir();
  const serversFile = `${dir}/servers.json`;
  await Deno.writeTextFile(
    serversFile,
    JSON.stringify({ servers: [{ name: NAMED, url: upstreamUrl }] }),
  );
  const t = await makeTestApp({
    env: { MCP_UPSTREAM_URL: upstreamUrl, MCP_SERVERS_FILE: serversFile },
  });
  const paths = [];
  for (const path of ["/mcp", `/mcp/${NAMED}`]) {
    const resource = { resource: `${TEST_BASE}${path}` };
    const response = await exchange(t, await issueCode(t, resource), resource);
    assert.equal(response.status, 200, await response.clone().text());
    paths.push({ path, accessToken: (await response.json()).access_token });
  }
  return {
    t,
    paths,
    async close() {
      t.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Runs the suite directly, then through the gateway at each path, and compares each run. */
async function runEveryWay(
  t: Deno.TestContext,
  suite: Suite,
  baseline: SuiteBaseline,
  fixturesUrl: string,
): Promise<void> {
  const gateway = await gatewayApp(fixturesUrl);
  try {
    const direct = await runSuite(suite, fixturesUrl);
    await t.step("the direct run fails exactly the baseline's scenarios", () => {
      assert.deepEqual(failedScenarios(direct), Object.keys(baseline.direct).sort());
    });
    for (const { path, accessToken } of gateway.paths) {
      const forwarder = startTokenForwarder(gateway.t, accessToken, path);
      try {
        const through = await runSuite(suite, forwarder.url);
        await t.step(`through ${path}`, (step) => compareRuns(step, baseline, direct, through));
      } finally {
        await forwarder.close();
      }
    }
  } finally {
    await gateway.close();
  }
}

/** What tests/conformance_baseline.json says about one suite, scenario → why. */
interface SuiteBaseline {
  /** Scenarios the fixture server fails directly. */
  direct: Record<string, string>;
  /** Scenarios whose checks come out differently through the gateway. */
  gateway: Record<string, string>;
}

async function readBaseline(suite: string): Promise<SuiteBaseline> {
  const all: Record<string, SuiteBaseline> = JSON.parse(
    await Deno.readTextFile(new URL("conformance_baseline.json", import.meta.url)),
  );
  const baseline = all[suite];
  assert.ok(baseline, `tests/conformance_baseline.json has no entry for ${suite}`);
  return baseline;
}

/** Compares the two runs scenario by scenario, each comparison its own step. */
async function compareRuns(
  t: Deno.TestContext,
  baseline: SuiteBaseline,
  direct: Results,
  gateway: Results,
): Promise<void> {
  await t.step("the same scenarios ran both ways", () => {
    assert.deepEqual([...gateway.keys()].sort(), [...direct.keys()].sort());
  });
  for (const [scenario, checks] of [...direct].sort(([a], [b]) => a.localeCompare(b))) {
    const why = baseline.gateway[scenario];
    if (why === undefined) {
      await t.step(`${scenario}: the same checks and outcomes through the gateway`, () => {
        assert.deepEqual(gateway.get(scenario), checks);
      });
    } else {
      // Fails once the gateway behaves like the server, so the entry is dropped then.
      await t.step(`${scenario}: differs through the gateway as the baseline says`, () => {
        assert.notDeepEqual(gateway.get(scenario), checks, `no longer differs: ${why}`);
      });
    }
  }
}

Deno.test({
  name:
    "MCP conformance suite 0.1.16 (2025-03-26 to 2025-11-25): the fixture server gives the same results through the gateway (/mcp and /mcp/<name>) as directly",
  // The suite's runner is a Node program in a child process.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const baseline = await readBaseline("0.1.16");
    const fixtures = startConformanceServer();
    try {
      await runEveryWay(t, SUITE_2025, baseline, fixtures.url);
    } finally {
      await fixtures.close();
    }
  },
});

Deno.test({
  name:
    "MCP conformance suite 0.2.0-alpha.12, requirements of 2026-07-28: the fixture server gives the same results through the gateway (/mcp and /mcp/<name>) as directly",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const baseline = await readBaseline("0.2.0-alpha.12 --requirements 2026-07-28");
    const fixtures = startModernConformanceServer();
    try {
      await runEveryWay(t, SUITE_2026, baseline, fixtures.url);
    } finally {
      await fixtures.close();
    }
  },
});
