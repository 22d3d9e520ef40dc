/**
 * `GET /metrics` over real HTTP against the real app: served only with METRICS_TOKEN and the
 * right bearer; every family of issue 23 §3 present after a sign-in (GitLab answering 429 once),
 * a token exchange, a refresh and its replay, a revocation, gateway calls (one reaching the MCP
 * server, one not), a rate-limit refusal and a 404; values moving as those requests say; and
 * the whole output read by a Prometheus text-format parser (and checked line by line).
 */

import assert from "node:assert/strict";
import parsePrometheusText from "parse-prometheus-text-format";
import { createAppDeps } from "../src/app/deps.ts";
import { createApp } from "../src/app/app.ts";
import { loadConfig } from "../src/app/config.ts";
import { silentLogger } from "../src/logger.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { createMetrics } from "../src/app/metrics.ts";
import { LABEL_WORDS } from "../src/metrics/catalog.ts";
import { GRANT_TYPES } from "../src/grants/registry.ts";
import { OPERATOR_COUNT_TTL_MS } from "../src/metrics/operator_revocations.ts";
import { BoundedLabel, Registry } from "../src/metrics_registry.ts";
import {
  type AppLike,
  exchange,
  FakeClock,
  makeTestApp,
  poll,
  refresh,
  register,
  startFlow,
  TEST_BASE,
  TEST_SECRET,
  token,
} from "./_helpers.ts";
import { startScripted } from "./_gateway.ts";

const METRICS_TOKEN = "metrics-token-that-is-at-least-32-bytes!";
const PREFIX = "gitlab_mcp_auth_";

/** A family as parse-prometheus-text-format reads it (histograms lose their labels there). */
interface ParsedFamily {
  name: string;
  help: string;
  type: string;
  metrics: { value?: string; labels?: Record<string, string> }[];
}

const parseText = parsePrometheusText as (text: string) => ParsedFamily[];

/** A GitLab on loopback: device flow, token, user and revoke; the token endpoint scripted. */
function startFakeGitLab() {
  const tokenAnswers: (() => Response)[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const { pathname } = new URL(request.url);
    await request.body?.cancel();
    switch (pathname) {
      case "/oauth/authorize_device":
        return Response.json({
          device_code: "dc-1",
          user_code: "ABCD-EFGH",
          verification_uri: "http://127.0.0.1/oauth/device",
          expires_in: 300,
          interval: 5,
        });
      case "/oauth/token":
        return tokenAnswers.shift()?.() ??
          Response.json({ access_token: "gl-a", refresh_token: "gl-r", expires_in: 7200 });
      case "/api/v4/user":
        return Response.json({ id: 7, username: "ada" });
      case "/oauth/revoke":
        return Response.json({});
      case "/api/v4/groups/team/members/all/7":
        return Response.json({ access_level: 30, state: "active" });
      default:
        return Response.json({ message: "Not Found" }, { status: 404 });
    }
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    tokenAnswers,
    close: () => server.shutdown(),
  };
}

/** The real app (real GitLab client) served on loopback; requests to TEST_BASE go there. */
async function serveApp(env: Record<string, string>) {
  const config = loadConfig({
    GITLAB_CLIENT_ID: "gitlab-app-id",
    JWT_SECRET: TEST_SECRET,
    BASE_URL: TEST_BASE,
    ...env,
  });
  const kv = await Deno.openKv(":memory:");
  const clock = new FakeClock();
  const deps = createAppDeps(config, {
    kv,
    clock,
    logger: silentLogger,
    templates: await loadTemplates(),
  });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    createApp(deps),
  );
  const origin = `http://127.0.0.1:${server.addr.port}`;
  const client: AppLike = {
    app: (request) => fetch(new Request(request.url.replace(TEST_BASE, origin), request)),
  };
  return {
    client,
    clock,
    get: (path: string, headers: Record<string, string> = {}) =>
      fetch(`${origin}${path}`, { headers }),
    close: async () => {
      await server.shutdown();
      kv.close();
    },
  };
}

function scrape(get: (path: string, headers?: Record<string, string>) => Promise<Response>) {
  return get("/metrics", { Authorization: `Bearer ${METRICS_TOKEN}` });
}

Deno.test("GET /metrics: 404 without METRICS_TOKEN, 401 without its bearer, 200 with it", async () => {
  const unset = await makeTestApp();
  try {
    const response = await unset.app(
      new Request(`${TEST_BASE}/metrics`, { headers: { Authorization: "Bearer x" } }),
    );
    assert.equal(response.status, 404);
    await response.body?.cancel();
  } finally {
    unset.close();
  }

  const s = await serveApp({ METRICS_TOKEN });
  try {
    for (
      const headers of [
        {} as Record<string, string>,
        { Authorization: `Bearer ${METRICS_TOKEN}x` },
        { Authorization: `Bearer ${METRICS_TOKEN.slice(0, -1)}` },
        { Authorization: `Basic ${METRICS_TOKEN}` },
        { Authorization: METRICS_TOKEN },
      ]
    ) {
      const response = await s.get("/metrics", headers);
      assert.equal(response.status, 401, JSON.stringify(headers));
      assert.equal((await response.json()).error, "invalid_token");
      assert.match(response.headers.get("www-authenticate") ?? "", /^Bearer /);
    }
    // The credential is read as every Bearer credential of the service is (bearer_token.ts).
    for (const authorization of [`bearer ${METRICS_TOKEN}`, `Bearer\t${METRICS_TOKEN}`]) {
      const response = await s.get("/metrics", { Authorization: authorization });
      assert.equal(response.status, 200, authorization);
      await response.body?.cancel();
    }
    const response = await scrape(s.get);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    assert.equal(response.headers.get("cache-control"), "no-store");
    parseWhole(await response.text());
  } finally {
    await s.close();
  }
});

Deno.test("METRICS_TOKEN shorter than 32 bytes stops start-up", () => {
  assert.throws(() => loadConfig({ METRICS_TOKEN: "short" }), /METRICS_TOKEN/);
});

Deno.test("every family is there after the service's work, with the values it did", async () => {
  const gitlab = startFakeGitLab();
  const mcp = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  const s = await serveApp({
    METRICS_TOKEN,
    GITLAB_URL: gitlab.url,
    MCP_UPSTREAM_URL: mcp.url,
    RATE_LIMIT_REGISTER: "1/3600",
    RATE_LIMIT_LOOPBACK: "limit",
    ALLOWED_GITLAB_GROUPS: "team",
  });
  try {
    const before = parseWhole(await (await scrape(s.get)).text());
    assert.equal(before.value(`${PREFIX}sessions_alive`), 0);
    assert.equal(before.value(`${PREFIX}rate_limit_refusals_total`, { bucket: "register" }), 0);

    // A sign-in: GitLab answers the first poll with 429, the next with tokens.
    gitlab.tokenAnswers.push(() =>
      Response.json({ message: "Retry later" }, { status: 429, headers: { "Retry-After": "1" } })
    );
    const flowState = await startFlow(s.client);
    const pending = await (await poll(s.client, flowState)).json();
    assert.equal(pending.status, "pending");
    s.clock.advance(6_000);
    const done = await (await poll(s.client, flowState)).json();
    assert.equal(done.status, "complete", JSON.stringify(done));

    const issued = await (await exchange(s.client, done.code)).json();
    assert.ok(issued.access_token);
    const bad = await exchange(s.client, "not-a-code");
    assert.equal(bad.status, 400);
    await bad.body?.cancel();
    const rotated = await (await refresh(s.client, issued.refresh_token)).json();
    assert.ok(rotated.refresh_token);
    const replay = await refresh(s.client, issued.refresh_token);
    assert.equal(replay.status, 400);
    await replay.body?.cancel();

    // The gateway: one call reaches the MCP server, one finds it gone (502).
    const call = () =>
      s.client.app(
        new Request(`${TEST_BASE}/mcp`, {
          method: "POST",
          headers: {
            Authorization: `Bearer ${rotated.access_token}`,
            "Content-Type": "application/json",
            Accept: "application/json, text/event-stream",
          },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        }),
      );
    const allowed = await call();
    assert.equal(allowed.status, 200);
    await allowed.body?.cancel();
    await mcp.close();
    const unreachable = await call();
    assert.equal(unreachable.status, 502);
    await unreachable.body?.cancel();

    const revoked = await token(s.client, { token: rotated.refresh_token }, {
      url: `${TEST_BASE}/revoke`,
    });
    assert.equal(revoked.status, 200);
    await revoked.body?.cancel();

    for (const expected of [201, 429]) {
      const response = await register(s.client, { redirect_uris: ["http://127.0.0.1:1/cb"] });
      assert.equal(response.status, expected);
      await response.body?.cancel();
    }
    const missing = await s.get("/no/such/path?x=1");
    assert.equal(missing.status, 404);
    await missing.body?.cancel();

    const text = await (await scrape(s.get)).text();
    const after = parseWhole(text);
    for (
      const [name, type] of [
        ["http_requests_total", "COUNTER"],
        ["http_request_duration_seconds", "HISTOGRAM"],
        ["sign_ins_started_total", "COUNTER"],
        ["sign_ins_finished_total", "COUNTER"],
        ["token_grants_total", "COUNTER"],
        ["refresh_replays_total", "COUNTER"],
        ["revocations_total", "COUNTER"],
        ["gateway_messages_total", "COUNTER"],
        ["gateway_upstream_responses_total", "COUNTER"],
        ["gitlab_requests_total", "COUNTER"],
        ["rate_limit_refusals_total", "COUNTER"],
        ["store_commit_duration_seconds", "HISTOGRAM"],
        ["sessions_alive", "GAUGE"],
      ]
    ) {
      assert.equal(after.family(`${PREFIX}${name}`)?.type, type, name);
    }
    const v = (name: string, labels: Record<string, string> = {}) =>
      after.value(`${PREFIX}${name}`, labels);

    assert.equal(v("http_requests_total", { route: "/token", status: "200" }), 2);
    assert.equal(v("http_requests_total", { route: "/token", status: "400" }), 2);
    assert.equal(v("http_requests_total", { route: "/oauth/poll", status: "200" }), 2);
    assert.equal(v("http_requests_total", { route: "mcp", status: "200" }), 1);
    assert.equal(v("http_requests_total", { route: "mcp", status: "502" }), 1);
    assert.equal(v("http_requests_total", { route: "unknown", status: "404" }), 1);
    assert.equal(v("http_requests_total", { route: "/metrics", status: "200" }), 1);
    assert.ok(!text.includes("/no/such/path"), "never the raw path");
    assert.equal(after.histogramCount(`${PREFIX}http_request_duration_seconds`, "/token"), 4);

    assert.equal(v("sign_ins_started_total", { mode: "device" }), 1);
    assert.equal(v("sign_ins_finished_total", { mode: "device", outcome: "completed" }), 1);
    assert.equal(
      v("token_grants_total", { grant_type: "authorization_code", outcome: "issued" }),
      1,
    );
    assert.equal(
      v("token_grants_total", { grant_type: "authorization_code", outcome: "invalid_grant" }),
      1,
    );
    assert.equal(v("token_grants_total", { grant_type: "refresh_token", outcome: "issued" }), 1);
    assert.equal(
      v("token_grants_total", { grant_type: "refresh_token", outcome: "invalid_grant" }),
      1,
    );
    assert.equal(v("refresh_replays_total", { outcome: "refused" }), 1);
    assert.equal(v("refresh_replays_total", { outcome: "grace" }), 0);
    assert.equal(v("revocations_total", { outcome: "session_ended" }), 1);
    assert.equal(
      v("gateway_messages_total", {
        server: "default",
        method: "tools/list",
        outcome: "allowed",
        tool: "none",
      }),
      1,
    );
    assert.equal(
      v("gateway_messages_total", {
        server: "default",
        method: "tools/list",
        outcome: "upstream_error",
        tool: "none",
      }),
      1,
    );
    assert.equal(v("gateway_upstream_responses_total", { server: "default", status: "200" }), 1);
    assert.equal(
      v("gateway_upstream_responses_total", { server: "default", status: "network" }),
      1,
    );
    assert.equal(
      v("gitlab_requests_total", { endpoint: "device_authorization", status: "200" }),
      1,
    );
    assert.equal(v("gitlab_requests_total", { endpoint: "token", status: "429" }), 1);
    assert.equal(v("gitlab_requests_total", { endpoint: "token", status: "200" }), 1);
    assert.equal(v("gitlab_requests_total", { endpoint: "user", status: "200" }), 1);
    assert.equal(v("gitlab_requests_total", { endpoint: "revoke", status: "200" }), 1);
    assert.equal(
      v("gitlab_requests_total", { endpoint: "membership", status: "200" }),
      1,
      "a group member lookup has its own endpoint label",
    );
    assert.equal(
      gitlabEndpoints(after).filter((endpoint) => endpoint === "other").length,
      0,
      "no call is `other`",
    );
    assert.equal(v("rate_limit_refusals_total", { bucket: "register" }), 1);
    assert.equal(v("rate_limit_refusals_total", { bucket: "token" }), 0);
    assert.ok((after.histogramCount(`${PREFIX}store_commit_duration_seconds`) ?? 0) > 0);

    // Counted at the first scrape (0) and not again within the minute; then anew.
    assert.equal(v("sessions_alive"), 0);
    s.clock.advance(60_000);
    // The session was revoked: a new sign-in makes one.
    gitlab.tokenAnswers.length = 0;
    const again = await startFlow(s.client, { state: "other" });
    s.clock.advance(6_000);
    const second = await (await poll(s.client, again)).json();
    assert.equal(second.status, "complete", JSON.stringify(second));
    const later = parseWhole(await (await scrape(s.get)).text());
    assert.equal(later.value(`${PREFIX}sessions_alive`), 1);
  } finally {
    await s.close();
    await gitlab.close();
    await mcp.close().catch(() => {});
  }
});

Deno.test("sessions_alive is counted at most once a minute, by the injected clock", async () => {
  const clock = new FakeClock();
  let counts = 0;
  let alive = 3;
  const metrics = createMetrics({
    clock,
    countLiveSessions: () => Promise.resolve((counts++, alive)),
    takeOperatorRevocations: () => Promise.resolve(0),
  });
  const read = async () => parseWhole(await metrics.render()).value(`${PREFIX}sessions_alive`);
  assert.equal(await read(), 3);
  alive = 5;
  clock.advance(59_999);
  assert.equal(await read(), 3);
  assert.equal(counts, 1);
  clock.advance(1);
  assert.equal(await read(), 5);
  assert.equal(counts, 2);
  // Concurrent scrapes share one count.
  clock.advance(60_000);
  await Promise.all([read(), read(), read()]);
  assert.equal(counts, 3);
});

Deno.test("label values are escaped and bounded; histograms are cumulative", async () => {
  const registry = new Registry();
  const counter = registry.counter<{ name: string }>({
    name: "t_total",
    help: 'a "help" with \\ and\nnewline',
    labelNames: ["name"],
  });
  counter.inc({ name: 'quote " backslash \\ newline \n end' });
  const histogram = registry.histogram<{ route: string }>({
    name: "t_seconds",
    help: "h",
    labelNames: ["route"],
    buckets: [0.1, 1],
  });
  for (const value of [0.05, 0.1, 0.5, 2]) histogram.observe({ route: "/a" }, value);
  const text = await registry.render();
  const parsed = parseWhole(text);
  assert.equal(parsed.value("t_total", { name: 'quote " backslash \\ newline \n end' }), 1);
  assert.equal(parsed.family("t_total")?.help, 'a "help" with \\ and\nnewline');
  assert.match(text, /^t_seconds_bucket\{route="\/a",le="0\.1"\} 2$/m);
  assert.match(text, /^t_seconds_bucket\{route="\/a",le="1"\} 3$/m);
  assert.match(text, /^t_seconds_bucket\{route="\/a",le="\+Inf"\} 4$/m);
  assert.match(text, /^t_seconds_sum\{route="\/a"\} 2\.65$/m);

  const tools = new BoundedLabel(2);
  assert.deepEqual(
    ["a", "b", "c", "a", "x".repeat(101), "bad\u0000", ""].map((name) => tools.of(name)),
    ["a", "b", "other", "a", "other", "other", "other"],
  );
  const metrics = createMetrics({
    clock: new FakeClock(),
    countLiveSessions: () => Promise.resolve(0),
    takeOperatorRevocations: () => Promise.resolve(0),
  });
  // A tool earns its label by being listed (or named in a rule), at most 100 of them; a name a
  // caller makes up stays `other` however often it is called (issue 33 §1.6).
  for (let i = 0; i < 150; i++) metrics.gatewayMessages.learnTool(`tool-${i}`);
  for (let i = 0; i < 150; i++) {
    metrics.gatewayMessages.inc({
      server: "default",
      method: "tools/call",
      outcome: "allowed",
      tool: `tool-${i}`,
    });
    metrics.gatewayMessages.inc({
      server: "default",
      method: "tools/call",
      outcome: "allowed",
      tool: `made-up-${i}`,
    });
  }
  metrics.gatewayMessages.inc({
    server: "default",
    method: "made/up",
    outcome: "allowed",
    tool: "none",
  });
  const gateway = parseWhole(await metrics.render()).family(`${PREFIX}gateway_messages_total`);
  assert.equal(gateway?.metrics.length, 102);
  assert.equal(
    gateway?.metrics.find((sample) => sample.labels?.tool === "other")?.value,
    "200",
  );
  assert.equal(
    gateway?.metrics.find((sample) => sample.labels?.method === "other")?.value,
    "1",
    "a method MCP does not define is other",
  );
});

Deno.test("every label value of the catalog is named in docs/operating.md's metrics table, and every family has a row", async () => {
  const readme = await Deno.readTextFile(new URL("../docs/operating.md", import.meta.url));
  const section = readme.slice(readme.indexOf("### Metrics"), readme.indexOf("## Operator's CLI"));
  const rows = new Map<string, string>();
  for (const line of section.split("\n")) {
    const row = line.match(/^\| `gitlab_mcp_auth_([a-z_]+)` +\|(.*)$/);
    if (row) rows.set(row[1], row[2]);
  }
  const metrics = createMetrics({
    clock: new FakeClock(),
    countLiveSessions: () => Promise.resolve(0),
    takeOperatorRevocations: () => Promise.resolve(0),
  });
  const families = parseWhole(await metrics.render()).names();
  assert.deepEqual(
    [...rows.keys()].toSorted(),
    families.map((name) => name.slice(PREFIX.length)).toSorted(),
    "one row per family",
  );
  const missing: string[] = [];
  const words = {
    ...LABEL_WORDS,
    token_grants_total: {
      ...LABEL_WORDS.token_grants_total,
      grant_type: [...GRANT_TYPES, ...LABEL_WORDS.token_grants_total.grant_type],
    },
  };
  for (const [metric, labels] of Object.entries(words)) {
    const row = rows.get(metric);
    assert.ok(row !== undefined, `${metric} has a row`);
    for (const [label, values] of Object.entries(labels)) {
      if (!row.includes(`\`${label}\``)) missing.push(`${metric}: label ${label}`);
      for (const value of values) {
        if (!row.includes(`\`${value}\``)) missing.push(`${metric}: ${label}=${value}`);
      }
    }
  }
  assert.deepEqual(missing, [], "every value is documented");
});

Deno.test("the operator's revocations are taken from the store at a scrape, at most every 5 s", async () => {
  const clock = new FakeClock();
  let stored = 0;
  let takes = 0;
  const metrics = createMetrics({
    clock,
    countLiveSessions: () => Promise.resolve(0),
    takeOperatorRevocations: () => {
      takes++;
      const taken = stored;
      stored = 0;
      return Promise.resolve(taken);
    },
  });
  const operator = async () =>
    parseWhole(await metrics.render()).value(`${PREFIX}revocations_total`, {
      outcome: "operator",
    });
  assert.equal(await operator(), 0);
  stored = 2;
  clock.advance(OPERATOR_COUNT_TTL_MS - 1);
  assert.equal(await operator(), 0, "a scrape right after a take does not read the store");
  clock.advance(1);
  assert.equal(await operator(), 2);
  stored = 3;
  clock.advance(OPERATOR_COUNT_TTL_MS);
  assert.equal(await operator(), 5, "added to what was taken before");
  assert.equal(takes, 3);
  assert.ok(OPERATOR_COUNT_TTL_MS < 10_000, "a CLI revocation shows within 10 s");
});

/** The endpoint label of every gitlab_requests_total sample. */
function gitlabEndpoints(parsed: ReturnType<typeof parseWhole>): string[] {
  return (parsed.family(`${PREFIX}gitlab_requests_total`)?.metrics ?? [])
    .map((sample) => sample.labels?.endpoint ?? "");
}

/**
 * The whole exposition read by parse-prometheus-text-format (which throws on a malformed line),
 * and checked line by line as Prometheus reads it: each family's HELP and TYPE once, before its
 * samples, every sample of a declared family, histogram buckets cumulative up to `+Inf` =
 * `_count`. Answers lookups of sample values.
 */
function parseWhole(text: string) {
  assert.ok(text.endsWith("\n"), "ends with a newline");
  const families = parseText(text);
  const declared = new Map<string, string>();
  const samples = new Map<string, number>();
  const sampleLine =
    /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$/;
  let current: string | undefined;
  for (const line of text.slice(0, -1).split("\n")) {
    const meta = line.match(/^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/);
    if (meta) {
      const [, kind, name, rest] = meta;
      if (kind === "HELP") {
        assert.ok(!declared.has(name), `${name} declared once`);
        current = name;
        declared.set(name, "");
      } else {
        assert.equal(current, name, `TYPE of ${name} follows its HELP`);
        assert.match(rest, /^(counter|gauge|histogram)$/);
        declared.set(name, rest);
      }
      continue;
    }
    const sample = line.match(sampleLine);
    assert.ok(sample, `a sample line: ${JSON.stringify(line)}`);
    const [, name, labels = "", value] = sample;
    const family = declared.get(name) !== undefined
      ? name
      : name.replace(/_(bucket|sum|count)$/, "");
    assert.equal(family, current, `${name} belongs to the family declared above it`);
    if (family !== name) assert.equal(declared.get(family), "histogram", name);
    const key = `${name}${labels}`;
    assert.ok(!samples.has(key), `one sample for ${key}`);
    samples.set(key, Number(value));
  }
  for (const [name, type] of declared) {
    if (type !== "histogram") continue;
    const series = new Map<string, number[]>();
    for (const [key, value] of samples) {
      const bucket = key.match(new RegExp(`^${name}_bucket\\{(.*?),?le="([^"]+)"\\}$`));
      if (!bucket) continue;
      const list = series.get(bucket[1]) ?? [];
      list.push(value);
      series.set(bucket[1], list);
      if (bucket[2] === "+Inf") {
        const labels = bucket[1] === "" ? "" : `{${bucket[1]}}`;
        assert.equal(value, samples.get(`${name}_count${labels}`), `${name}${labels} +Inf = count`);
      }
    }
    for (const [labels, values] of series) {
      for (let i = 1; i < values.length; i++) {
        assert.ok(values[i] >= values[i - 1], `${name}{${labels}} buckets are cumulative`);
      }
    }
  }
  return {
    family: (name: string) => families.find((family) => family.name === name),
    names: () => families.map((family) => family.name),
    /** The sample of `name` with exactly `labels` (0 when the family has no such sample). */
    value(name: string, labels: Record<string, string> = {}): number | undefined {
      const family = families.find((f) => f.name === name);
      assert.ok(family, `family ${name}`);
      const wanted = JSON.stringify(Object.entries(labels).sort());
      const found = family.metrics.find((sample) =>
        JSON.stringify(Object.entries(sample.labels ?? {}).sort()) === wanted
      );
      return found === undefined ? 0 : Number(found.value);
    },
    /** The `_count` of a histogram series (its only label `route`, or none). */
    histogramCount(name: string, route?: string): number | undefined {
      return samples.get(`${name}_count${route === undefined ? "" : `{route="${route}"}`}`);
    },
  };
}
