/**
 * A repeated `/authorize` (not in the spec; docs/spec-choices.md "Where the spec is silent"): the
 * identical request (every parameter) within 60 seconds — a double redirect, a prefetch, a reload —
 * shows the same flow instead of starting a second GitLab device flow. A different request, a flow
 * that is complete or expired, or the end of the 60 seconds starts a fresh one.
 */

import assert from "node:assert/strict";
import { recordsOf } from "../src/store/keys.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  authorizeQuery,
  countRecords,
  FakeClock,
  FakeUpstream,
  flowDataFromPage,
  makeTestApp,
  poll,
  TEST_BASE,
  type TestApp,
  withApp,
} from "./_helpers.ts";

/** GET /authorize?query; the page's flow data and HTML (asserting 200). */
async function loadPage(
  t: TestApp,
  query = authorizeQuery(),
): Promise<{ flowState: string; expiresInSeconds: unknown; html: string }> {
  const response = await t.app(new Request(`${TEST_BASE}/authorize?${query}`));
  const html = await response.text();
  assert.equal(response.status, 200, html);
  const { flowState, expiresInSeconds } = flowDataFromPage(html);
  return { flowState, expiresInSeconds, html };
}

/** Makes every device flow GitLab starts get its own device and user code, after `delayMs`. */
function numberDevices(upstream: FakeUpstream, delayMs = 0): void {
  const device = upstream.device;
  upstream.startDeviceAuthorization = async () => {
    const n = ++upstream.calls.start;
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    if (upstream.startResult) throw upstream.startResult;
    return { ...device, deviceCode: `device-code-${n}`, userCode: `CODE-000${n}` };
  };
}

function withNumberedDevices(fn: (t: TestApp) => Promise<void>): Promise<void> {
  return withApp((t) => {
    numberDevices(t.upstream);
    return fn(t);
  });
}

Deno.test("repeat: the same /authorize URL twice → one GitLab device flow, the same page", () =>
  withNumberedDevices(async (t) => {
    const first = await loadPage(t);
    t.clock.advance(2_000);
    const second = await loadPage(t);
    assert.equal(t.upstream.calls.start, 1, "one device flow at GitLab");
    assert.equal(second.flowState, first.flowState);
    assert.ok(second.html.includes("CODE-0001"), "the same user code");
    assert.equal(await countRecords(t.kv, "flow"), 1);
    const polled = await poll(t, second.flowState);
    assert.deepEqual(await polled.json(), { status: "pending" });
  }));

Deno.test("repeat: five identical /authorize requests at once → one GitLab device flow", () =>
  withApp(async (t) => {
    numberDevices(t.upstream, 30);
    const pages = await Promise.all(Array.from({ length: 5 }, () => loadPage(t)));
    assert.equal(t.upstream.calls.start, 1);
    assert.deepEqual(new Set(pages.map((page) => page.flowState)).size, 1);
    assert.ok(pages.every((page) => page.html.includes("CODE-0001")));
  }));

Deno.test("repeat: two instances on one KV file, the same /authorize at once → one device flow", async () => {
  const dir = await Deno.makeTempDir({ prefix: "repeat-" });
  const upstream = new FakeUpstream();
  numberDevices(upstream, 30);
  const shared = { kvPath: `${dir}/kv.sqlite`, clock: new FakeClock(), upstream };
  const a = await makeTestApp(shared);
  const b = await makeTestApp(shared);
  try {
    const [pageA, pageB] = await Promise.all([loadPage(a), loadPage(b)]);
    assert.equal(upstream.calls.start, 1);
    assert.equal(pageA.flowState, pageB.flowState);
  } finally {
    a.close();
    b.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("repeat: the same URL from another client address starts its own flow (a leaked URL shows no one else's user code)", () =>
  withNumberedDevices(async (t) => {
    const from = (hostname: string) =>
      ({ remoteAddr: { transport: "tcp", hostname, port: 40000 } }) as Deno.ServeHandlerInfo;
    const load = async (hostname: string) => {
      const response = await t.app(
        new Request(`${TEST_BASE}/authorize?${authorizeQuery()}`),
        from(hostname),
      );
      const html = await response.text();
      assert.equal(response.status, 200, html);
      return flowDataFromPage(html).flowState;
    };
    const victim = await load("203.0.113.9");
    const holderOfTheUrl = await load("198.51.100.7");
    assert.notEqual(holderOfTheUrl, victim);
    assert.equal(t.upstream.calls.start, 2, "a device flow each");
    assert.equal(await load("203.0.113.9"), victim, "the victim's own reload still shares");
    assert.equal(t.upstream.calls.start, 2);
  }));

Deno.test("repeat: the same parameters in another order are the same request", () =>
  withNumberedDevices(async (t) => {
    const query = new URLSearchParams(authorizeQuery());
    const reversed = new URLSearchParams([...query].reverse());
    const first = await loadPage(t, query.toString());
    const second = await loadPage(t, reversed.toString());
    assert.equal(second.flowState, first.flowState);
    assert.equal(t.upstream.calls.start, 1);
  }));

Deno.test("repeat: a different state, code_challenge, redirect_uri or client is a different request", () =>
  withNumberedDevices(async (t) => {
    const flows = new Set<string>();
    flows.add((await loadPage(t)).flowState);
    const variants: Record<string, string>[] = [
      { state: "other" },
      { code_challenge: "x".repeat(43) },
      { redirect_uri: "http://127.0.0.1:9999/other" },
      { client_id: "client-2" },
      { scope: "mcp:tools" },
    ];
    for (const overrides of variants) {
      flows.add((await loadPage(t, authorizeQuery(overrides))).flowState);
    }
    assert.equal(flows.size, 6);
    assert.equal(t.upstream.calls.start, 6);
  }));

Deno.test("repeat: once the first flow is complete, the same request starts a fresh flow", () =>
  withNumberedDevices(async (t) => {
    const first = await loadPage(t);
    t.upstream.approve();
    const done = await (await poll(t, first.flowState)).json();
    assert.equal(done.status, "complete");
    assert.equal(await countRecords(t.kv, "repeat"), 0, "the request is forgotten with its flow");
    const again = await loadPage(t);
    assert.notEqual(again.flowState, first.flowState);
    assert.ok(again.html.includes("CODE-0002"));
    assert.equal(t.upstream.calls.start, 2);
  }));

Deno.test("repeat: once the first flow failed, the same request starts a fresh flow", () =>
  withNumberedDevices(async (t) => {
    const first = await loadPage(t);
    t.upstream.polls.push(new UpstreamError("terminal", "access_denied", "access_denied"));
    assert.equal((await (await poll(t, first.flowState)).json()).status, "failed");
    const again = await loadPage(t);
    assert.notEqual(again.flowState, first.flowState);
    assert.equal(t.upstream.calls.start, 2);
  }));

Deno.test("repeat: once the first flow expired (within the 60 s), the same request starts a fresh flow", () =>
  withApp(async (t) => {
    t.upstream.device = { ...t.upstream.device, expiresInSeconds: 30 };
    numberDevices(t.upstream);
    const first = await loadPage(t);
    t.clock.advance(30_001);
    const again = await loadPage(t);
    assert.notEqual(again.flowState, first.flowState);
    assert.equal(t.upstream.calls.start, 2);
    assert.equal(again.expiresInSeconds, 30);
    assert.equal((await loadPage(t)).flowState, again.flowState, "shared from now on");
    assert.equal(t.upstream.calls.start, 2);
  }));

Deno.test("repeat: after 60 s the same request starts a fresh flow; the first one lives on", () =>
  withNumberedDevices(async (t) => {
    const first = await loadPage(t);
    t.clock.advance(59_999);
    assert.equal((await loadPage(t)).flowState, first.flowState);
    t.clock.advance(2);
    const later = await loadPage(t);
    assert.notEqual(later.flowState, first.flowState);
    assert.equal(t.upstream.calls.start, 2);
    // …and the next 60 s share that new flow.
    t.clock.advance(1_000);
    assert.equal((await loadPage(t)).flowState, later.flowState);
    assert.equal(t.upstream.calls.start, 2);
    assert.deepEqual(await (await poll(t, first.flowState)).json(), { status: "pending" });
  }));

Deno.test("repeat: the repeated page counts down what is left of the flow's lifetime", () =>
  withNumberedDevices(async (t) => {
    assert.equal((await loadPage(t)).expiresInSeconds, 300);
    t.clock.advance(20_000);
    assert.equal((await loadPage(t)).expiresInSeconds, 280);
  }));

Deno.test("repeat: a flow GitLab refused to start is not remembered; the next load starts one", () =>
  withNumberedDevices(async (t) => {
    t.upstream.startResult = new UpstreamError("transient", "http_503", "upstream answered 503");
    const refused = await t.app(new Request(`${TEST_BASE}/authorize?${authorizeQuery()}`));
    assert.equal(refused.status, 500);
    await refused.body?.cancel();
    assert.equal(await countRecords(t.kv, "repeat"), 0);
    t.upstream.startResult = undefined;
    const page = await loadPage(t);
    assert.ok(page.html.includes("CODE-0002"));
    assert.equal(t.upstream.calls.start, 2);
  }));

Deno.test("repeat: the flow state is sealed in the repeat record, never in clear", () =>
  withNumberedDevices(async (t) => {
    const page = await loadPage(t);
    const stored = JSON.stringify(await recordsOf(t.kv, "repeat"));
    assert.ok(stored.length > 0 && !stored.includes(page.flowState));
  }));
