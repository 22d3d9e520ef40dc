/**
 * How many folders of `src/` a request passes through (issue 34: a refresh grant and a gateway
 * request each at most 5). Measured, not declared: V8's precise coverage counts every function
 * that runs while one request is served, and the folders of `src/` those functions live in are
 * the request's path. Building the app and signing in run before the counts are reset.
 *
 * The ground floor (the HTTP toolkit `src/http/` and the loose files at `src/`'s root, floor 0
 * in tests/architecture_test.ts) is the house's own standard library, used by every request, and
 * is reported but not counted; every other folder is (a folder is a top-level folder of `src/`,
 * as in the floors rule). Each request is measured after one like it, so what is built once,
 * on a first request, is not counted as every request's path. `SHOW_FUNCTIONS=1` prints the
 * functions that ran, by folder.
 */

import assert from "node:assert/strict";
import { Session } from "node:inspector/promises";
import { issueTokens, makeTestApp, refresh, type TestApp } from "./_helpers.ts";
import { echo, MCP, startScripted } from "./_gateway.ts";

const SRC = new URL("../src/", import.meta.url).href;

interface ScriptCoverage {
  url: string;
  functions: { functionName: string; ranges: { count: number }[] }[];
}

/** The folders of `src/` whose functions ran during `fn`, with the functions, by folder. */
async function foldersRunBy(fn: () => Promise<void>): Promise<Map<string, Set<string>>> {
  const session = new Session();
  session.connect();
  try {
    await session.post("Profiler.enable");
    await session.post("Profiler.startPreciseCoverage", { callCount: true, detailed: false });
    await session.post("Profiler.takePreciseCoverage"); // resets the counts
    await fn();
    const { result } = await session.post("Profiler.takePreciseCoverage") as {
      result: ScriptCoverage[];
    };
    await session.post("Profiler.stopPreciseCoverage");
    const folders = new Map<string, Set<string>>();
    for (const script of result) {
      if (!script.url.startsWith(SRC)) continue;
      const ran = script.functions.filter((f) => f.functionName !== "" && f.ranges[0].count > 0);
      if (ran.length === 0) continue;
      const path = script.url.slice(SRC.length);
      const folder = path.includes("/") ? path.slice(0, path.indexOf("/")) : ".";
      const names = folders.get(folder) ?? new Set();
      for (const f of ran) names.add(`${path}:${f.functionName}`);
      folders.set(folder, names);
    }
    return folders;
  } finally {
    session.disconnect();
  }
}

/** The ground floor: used by every request, not counted. */
const GROUND = new Set([".", "http"]);

/** The counted folders `folders` names, sorted (every folder with functions on SHOW_FUNCTIONS). */
function show(label: string, folders: Map<string, Set<string>>): string[] {
  const names = [...folders.keys()].filter((folder) => !GROUND.has(folder)).sort();
  if (Deno.env.get("SHOW_FUNCTIONS")) {
    const lines = [...folders].map(([folder, fns]) => `  ${folder}: ${[...fns].join(" ")}`);
    Deno.stderr.writeSync(new TextEncoder().encode(`${label}: ${names}\n${lines.join("\n")}\n`));
  }
  return names;
}

/**
 * The configurations measured: the default, and an allow-list whose decision is not due (a
 * re-check asks GitLab once per ACCESS_RECHECK_SECONDS; that request runs access/ and
 * upstream/ too).
 */
const CONFIGURATIONS: [string, Record<string, string>][] = [
  ["", {}],
  [" with an allow-list", { ALLOWED_GITLAB_GROUPS: "acme", GITLAB_SCOPES: "read_user read_api" }],
];

for (const [label, env] of CONFIGURATIONS) {
  Deno.test(`a refresh grant passes through at most 5 folders of src/${label}`, async () => {
    const t = await makeTestApp({ env });
    t.upstream.groupLevels = { acme: 30 };
    try {
      const first = await refresh(t, (await issueTokens(t)).refresh_token);
      const { refresh_token } = await first.json();
      let status = 0;
      const folders = await foldersRunBy(async () => {
        const response = await refresh(t, refresh_token);
        status = response.status;
        await response.body?.cancel();
      });
      assert.equal(status, 200);
      const names = show(`refresh${label}`, folders);
      assert.ok(names.includes("grants"), `the counts saw the grant: ${names}`);
      assert.ok(names.length <= 5, `a refresh passes through ${names.length}: ${names}`);
    } finally {
      t.close();
    }
  });
}

async function gatewayCall(t: TestApp, accessToken: string): Promise<number> {
  const response = await t.app(
    new Request(MCP, {
      method: "POST",
      headers: {
        authorization: `Bearer ${accessToken}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    }),
  );
  await response.body?.cancel();
  return response.status;
}

for (const [label, env] of CONFIGURATIONS) {
  Deno.test(`a gateway request passes through at most 5 folders of src/${label}`, async () => {
    const upstream = startScripted(echo);
    const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: upstream.url, ...env } });
    t.upstream.groupLevels = { acme: 30 };
    try {
      // The gateway's first request builds its guard; the measured one carries a token the
      // gateway has not seen (another session's), so it takes the whole path, not the memory's.
      assert.equal(await gatewayCall(t, (await issueTokens(t)).access_token), 200);
      const { access_token } = await issueTokens(t);
      let status = 0;
      const folders = await foldersRunBy(async () => {
        status = await gatewayCall(t, access_token);
      });
      assert.equal(status, 200);
      const names = show(`gateway${label}`, folders);
      assert.ok(names.includes("gateway"), `the counts saw the gateway: ${names}`);
      assert.ok(names.length <= 5, `a gateway request passes through ${names.length}: ${names}`);
    } finally {
      t.close();
      await upstream.close();
    }
  });
}
