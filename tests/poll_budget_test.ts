/**
 * The GitLab poll budget and the pending-flow caps (issue 22 §1.1; docs/spec-choices.md "Poll
 * economy", docs/security.md "Abuse limits"): GITLAB_POLL_BUDGET polls a second over all instances,
 * shared fairly among client prefixes (IPv4 /24, IPv6 /56), a reserve for flows near their expiry,
 * halved after GitLab's 429; MAX_PENDING_FLOWS in all and MAX_PENDING_FLOWS_PER_PREFIX per prefix,
 * checked before GitLab is asked to start a flow. Over HTTP against the real app, on the fake
 * clock.
 */

import assert from "node:assert/strict";
import type { DevicePollResult } from "../src/upstream/types.ts";
import type { LogFields, Logger } from "../src/logger.ts";
import {
  assertError,
  authorizeQuery,
  FakeClock,
  FakeUpstream,
  flowDataFromPage,
  makeTestApp,
  TEST_BASE,
  type TestApp,
  withApp,
} from "./_helpers.ts";

/** A GitLab that answers each device code on its own: pending until the test approves it. */
class PerFlowUpstream extends FakeUpstream {
  approved = new Set<string>();
  polled: string[] = [];
  /** Answers queued for the next polls, whatever their device code. */
  next: DevicePollResult[] = [];

  // The base class ignores the device code; the Upstream interface passes it.
  override pollDeviceToken(...[deviceCode]: string[]): Promise<DevicePollResult> {
    this.calls.poll++;
    this.polled.push(deviceCode);
    const queued = this.next.shift();
    if (queued) return Promise.resolve(queued);
    if (!this.approved.has(deviceCode)) return Promise.resolve({ kind: "pending" });
    return Promise.resolve({
      kind: "token",
      tokens: { accessToken: `gl-${deviceCode}`, refreshToken: "r", expiresInSeconds: 7200 },
    });
  }
}

/** Limits that would get in the way of these tests are off; the budget's variables as given. */
const BASE_ENV = { RATE_LIMIT_AUTHORIZE: "off", RATE_LIMIT_POLL: "off" };

function withBudgetApp(
  env: Record<string, string>,
  fn: (t: TestApp, gitlab: PerFlowUpstream) => Promise<void>,
  logger?: Logger,
): Promise<void> {
  const upstream = new PerFlowUpstream();
  return withApp((t) => fn(t, upstream), { env: { ...BASE_ENV, ...env }, upstream, logger });
}

/** What Deno.serve hands the handler for a TCP peer. */
function peer(hostname: string): Deno.ServeHandlerInfo {
  return {
    remoteAddr: { transport: "tcp", hostname, port: 1234 },
  } as unknown as Deno.ServeHandlerInfo;
}

let flowCount = 0;

/** `/authorize` from `ip`, its flow's device code named `deviceCode` at GitLab. */
function authorizeFrom(
  t: Pick<TestApp, "app" | "upstream">,
  ip: string,
  device: { deviceCode?: string; expiresInSeconds?: number } = {},
): Promise<Response> {
  t.upstream.device = {
    ...t.upstream.device,
    deviceCode: device.deviceCode ?? `code-${++flowCount}`,
    expiresInSeconds: device.expiresInSeconds ?? 300,
  };
  const query = authorizeQuery({ state: `s-${++flowCount}` });
  return t.app(new Request(`${TEST_BASE}/authorize?${query}`), peer(ip));
}

/** Starts a flow from `ip` (asserting the page); its flow state. */
async function startFrom(
  t: Pick<TestApp, "app" | "upstream">,
  ip: string,
  device: { deviceCode?: string; expiresInSeconds?: number } = {},
): Promise<string> {
  const response = await authorizeFrom(t, ip, device);
  const html = await response.text();
  assert.equal(response.status, 200, html);
  return flowDataFromPage(html).flowState;
}

/** The page's poll of `flowState`, from `ip`: the body (asserting a 200). */
async function pollFrom(
  t: Pick<TestApp, "app">,
  ip: string,
  flowState: string,
): Promise<Record<string, unknown>> {
  const url = `${TEST_BASE}/oauth/poll?flow_state=${encodeURIComponent(flowState)}`;
  const response = await t.app(new Request(url), peer(ip));
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body;
}

/** `count` flows, one from each of `count` IPv4 /24s. */
async function flowsFromManyNetworks(t: TestApp, count: number, expiresInSeconds = 300) {
  const flows: { ip: string; flowState: string }[] = [];
  for (let i = 0; i < count; i++) {
    const ip = `198.18.${i}.7`;
    flows.push({ ip, flowState: await startFrom(t, ip, { expiresInSeconds }) });
  }
  return flows;
}

/** GitLab polls made while every flow's page polls once. */
async function pollAll(
  t: TestApp,
  gitlab: PerFlowUpstream,
  flows: { ip: string; flowState: string }[],
): Promise<number> {
  const before = gitlab.calls.poll;
  for (const { ip, flowState } of flows) await pollFrom(t, ip, flowState);
  return gitlab.calls.poll - before;
}

Deno.test("poll budget: 30 flows from 30 networks, pages polling every second → at most GITLAB_POLL_BUDGET GitLab polls a second, and no fewer than its open part", () =>
  withBudgetApp({}, async (t, gitlab) => {
    const flows = await flowsFromManyNetworks(t, 30);
    for (let second = 0; second < 12; second++) {
      const polls = await pollAll(t, gitlab, flows);
      assert.ok(polls <= 5, `second ${second}: ${polls} GitLab polls`);
      // A fifth is kept for flows near their expiry; the rest is spent while flows wait.
      assert.ok(polls >= 4, `second ${second}: ${polls} GitLab polls`);
      t.clock.advance(1000);
    }
  }));

Deno.test("poll budget: a fractional budget (0.5) spreads its polls over windows", () =>
  withBudgetApp({ GITLAB_POLL_BUDGET: "0.5" }, async (t, gitlab) => {
    const flows = await flowsFromManyNetworks(t, 10);
    let total = 0;
    for (let second = 0; second < 10; second++) {
      const polls = await pollAll(t, gitlab, flows);
      assert.ok(polls <= 1, `second ${second}: ${polls}`);
      total += polls;
      t.clock.advance(1000);
    }
    assert.equal(total, 5, "one poll every two seconds");
  }));

Deno.test("poll budget: one /56 with 40 flows polling first every second cannot starve another network's single flow: the victim's approved flow completes within two of its polls", () =>
  withBudgetApp({}, async (t, gitlab) => {
    const attacker: { ip: string; flowState: string }[] = [];
    for (let i = 0; i < 40; i++) {
      // 40 different /64s, all inside 2001:db8:0:100::/56.
      const ip = `2001:db8:0:1${i.toString(16).padStart(2, "0")}::1`;
      attacker.push({ ip, flowState: await startFrom(t, ip) });
    }
    const victimIp = "192.0.2.10";
    const victim = await startFrom(t, victimIp, { deviceCode: "victim" });
    gitlab.approved.add("victim");

    let victimPolls = 0;
    let done: Record<string, unknown> | undefined;
    for (let second = 0; second < 30 && !done; second++) {
      const before = gitlab.calls.poll;
      await pollAll(t, gitlab, attacker);
      if (second % 5 === 2) {
        victimPolls++;
        const body = await pollFrom(t, victimIp, victim);
        if (body.status === "complete") done = body;
        else assert.deepEqual(body, { status: "pending" }, "a deferred poll is pending");
      }
      assert.ok(gitlab.calls.poll - before <= 5, `second ${second}: within the budget`);
      t.clock.advance(1000);
    }
    assert.equal(done?.status, "complete", "the victim signed in");
    assert.ok(victimPolls <= 2, `completed at the victim's poll ${victimPolls}`);
  }));

Deno.test("poll budget: a flow near its expiry that missed its poll gets the reserved part of a spent window", () =>
  withBudgetApp({}, async (t, gitlab) => {
    const busy = await flowsFromManyNetworks(t, 10);
    const late = "192.0.2.77";
    // 50 s left and never polled: near its expiry without a poll.
    const nearExpiry = await startFrom(t, late, { deviceCode: "near", expiresInSeconds: 50 });
    const fresh = await startFrom(t, "192.0.2.78", { deviceCode: "fresh" });

    assert.equal(await pollAll(t, gitlab, busy), 4, "the window's open part is spent");
    await pollFrom(t, "192.0.2.78", fresh);
    assert.ok(!gitlab.polled.includes("fresh"), "an ordinary flow waits for the next window");
    await pollFrom(t, late, nearExpiry);
    assert.ok(gitlab.polled.includes("near"), "the flow near its expiry is polled");
    assert.equal(gitlab.calls.poll, 5, "and the budget still holds");
  }));

Deno.test("poll budget: GitLab's 429 on a poll pauses as before, then halves the budget, which grows back within 10 minutes", async () => {
  const warnings: string[] = [];
  const logger: Logger = {
    info: () => {},
    error: () => {},
    warn: (message: string, _fields?: LogFields) => void warnings.push(message),
  };
  await withBudgetApp({ GITLAB_POLL_BUDGET: "10" }, async (t, gitlab) => {
    const flows = await flowsFromManyNetworks(t, 30, 3600);
    assert.equal(await pollAll(t, gitlab, flows), 8, "10 a second, 2 of them kept in reserve");
    t.clock.advance(5_000);
    gitlab.next.push({ kind: "rate_limited", backoff: { retryAfterSeconds: 30 } });
    assert.equal(await pollAll(t, gitlab, flows), 1, "the 429 pauses every poll");
    t.clock.advance(30_000);
    assert.equal(await pollAll(t, gitlab, flows), 4, "after the pause: 5 a second, 1 in reserve");
    t.clock.advance(1000);
    assert.equal(await pollAll(t, gitlab, flows), 4, "still cut");
    t.clock.advance(10 * 60_000);
    assert.equal(await pollAll(t, gitlab, flows), 8, "recovered");
    assert.deepEqual(
      warnings.filter((line) => /budget/.test(line)),
      ["upstream rate limit: poll budget cut"],
    );
  }, logger);
});

Deno.test("poll budget: two instances on one KV file share the budget", async () => {
  const dir = await Deno.makeTempDir({ prefix: "poll-budget-" });
  const upstream = new PerFlowUpstream();
  const shared = {
    kvPath: `${dir}/kv.sqlite`,
    clock: new FakeClock(),
    upstream,
    env: { ...BASE_ENV, GITLAB_POLL_BUDGET: "3" },
  };
  const a = await makeTestApp(shared);
  const b = await makeTestApp(shared);
  try {
    const flows = await flowsFromManyNetworks(a, 20);
    for (let second = 0; second < 5; second++) {
      const before = upstream.calls.poll;
      await Promise.all(
        flows.map(({ ip, flowState }, i) => pollFrom(i % 2 ? b : a, ip, flowState)),
      );
      const polls = upstream.calls.poll - before;
      assert.ok(polls <= 3 && polls >= 1, `second ${second}: ${polls} GitLab polls`);
      a.clock.advance(1000);
    }
  } finally {
    a.close();
    b.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("pending caps: MAX_PENDING_FLOWS_PER_PREFIX counts an IPv6 client by its /56 and an IPv4 client by its /24; 429 with Retry-After before GitLab is asked", () =>
  withBudgetApp({ MAX_PENDING_FLOWS_PER_PREFIX: "3" }, async (t, gitlab) => {
    for (const ip of ["2001:db8:0:100::1", "2001:db8:0:1ff::1", "2001:db8:0:180:1:2:3:4"]) {
      await startFrom(t, ip);
    }
    const refused = await authorizeFrom(t, "2001:db8:0:1ab::9");
    assert.equal(refused.headers.get("retry-after"), "300", "until the first flow expires");
    await assertError(refused, 429, "temporarily_unavailable");
    assert.equal(gitlab.calls.start, 3, "GitLab was not asked");
    await startFrom(t, "2001:db8:0:200::1"); // the next /56

    const ipv4 = [];
    for (const ip of ["203.0.113.1", "203.0.113.2", "203.0.113.3"]) {
      ipv4.push(await startFrom(t, ip, { deviceCode: ip }));
    }
    await assertError(await authorizeFrom(t, "203.0.113.200"), 429, "temporarily_unavailable");
    await startFrom(t, "203.0.114.1");

    // A completed sign-in frees its place.
    gitlab.approved.add("203.0.113.1");
    assert.equal((await pollFrom(t, "203.0.113.1", ipv4[0])).status, "complete");
    await startFrom(t, "203.0.113.200");
  }));

Deno.test("pending caps: MAX_PENDING_FLOWS in all; expired flows leave room; loopback is exempt (and counted)", () =>
  withBudgetApp({ MAX_PENDING_FLOWS: "3" }, async (t, gitlab) => {
    await startFrom(t, "127.0.0.1");
    await startFrom(t, "198.51.100.1");
    t.clock.advance(100_000);
    await startFrom(t, "203.0.113.1");
    const refused = await authorizeFrom(t, "192.0.2.1");
    assert.equal(refused.headers.get("retry-after"), "200", "until the first flow expires");
    await assertError(refused, 429, "temporarily_unavailable", /Too many sign-ins pending/);
    assert.equal(gitlab.calls.start, 3);
    await startFrom(t, "::1"); // exempt by RATE_LIMIT_LOOPBACK=exempt
    t.clock.advance(200_001);
    await startFrom(t, "192.0.2.1");
  }));

Deno.test("pending caps: a NAT64 client counts as its IPv4 /24, whichever translator prefix it comes through", () =>
  withBudgetApp({ MAX_PENDING_FLOWS_PER_PREFIX: "2" }, async (t, gitlab) => {
    await startFrom(t, "64:ff9b::203.0.113.1");
    await startFrom(t, "64:ff9b:1:2::203.0.113.2");
    await assertError(await authorizeFrom(t, "203.0.113.3"), 429, "temporarily_unavailable");
    await assertError(await authorizeFrom(t, "64:ff9b::203.0.113.4"), 429);
    assert.equal(gitlab.calls.start, 2);
    // The translator's clients on other networks are not that /24 (nor one /56 together).
    for (const ip of ["64:ff9b::198.51.100.1", "64:ff9b::192.0.2.1", "64:ff9b::192.0.2.2"]) {
      await startFrom(t, ip);
    }
  }));

Deno.test("poll budget: 40 flows from one IPv4 /24 through NAT64 cannot starve a single flow from another network through the same translator", () =>
  withBudgetApp({}, async (t, gitlab) => {
    const attacker: { ip: string; flowState: string }[] = [];
    for (let i = 0; i < 40; i++) {
      const ip = `64:ff9b::198.18.0.${i + 1}`;
      attacker.push({ ip, flowState: await startFrom(t, ip) });
    }
    const victimIp = "64:ff9b::192.0.2.10";
    const victim = await startFrom(t, victimIp, { deviceCode: "victim" });
    gitlab.approved.add("victim");

    let done: Record<string, unknown> | undefined;
    let victimPolls = 0;
    for (let second = 0; second < 30 && !done; second++) {
      await pollAll(t, gitlab, attacker);
      if (second % 5 === 2) {
        victimPolls++;
        const body = await pollFrom(t, victimIp, victim);
        if (body.status === "complete") done = body;
      }
      t.clock.advance(1000);
    }
    assert.equal(done?.status, "complete", "the victim signed in");
    assert.ok(victimPolls <= 2, `completed at the victim's poll ${victimPolls}`);
  }));

Deno.test("pending caps: RATE_LIMIT_EXEMPT clients are exempt from both caps, and counted in all", () =>
  withBudgetApp(
    {
      MAX_PENDING_FLOWS_PER_PREFIX: "2",
      MAX_PENDING_FLOWS: "6",
      RATE_LIMIT_EXEMPT: "203.0.113.0/28",
    },
    async (t, gitlab) => {
      for (let i = 1; i <= 5; i++) await startFrom(t, `203.0.113.${i}`);
      // A neighbour in the same /24 is not charged for the office's flows.
      await startFrom(t, "203.0.113.200");
      await assertError(await authorizeFrom(t, "198.51.100.1"), 429, "temporarily_unavailable");
      await startFrom(t, "64:ff9b::203.0.113.6"); // the office through NAT64
      assert.equal(gitlab.calls.start, 7);
    },
  ));

Deno.test("pending caps: what a trusted proxy forwards as no address is one `unknown-client` prefix", () =>
  withBudgetApp({ MAX_PENDING_FLOWS_PER_PREFIX: "2", TRUST_PROXY: "true" }, async (t) => {
    const behindProxy = (xff: string) => {
      const query = authorizeQuery({ state: `s-${++flowCount}` });
      t.upstream.device = { ...t.upstream.device, deviceCode: `code-${++flowCount}` };
      return t.app(
        new Request(`${TEST_BASE}/authorize?${query}`, { headers: { "X-Forwarded-For": xff } }),
        peer("127.0.0.1"),
      );
    };
    assert.equal((await behindProxy("unknown")).status, 200);
    assert.equal((await behindProxy("1.2.3")).status, 200);
    await assertError(await behindProxy("0x01020304"), 429, "temporarily_unavailable");
    assert.equal((await behindProxy("198.51.100.1")).status, 200);
  }));

Deno.test("poll budget: a RATE_LIMIT_EXEMPT flow has no share to keep to, but stays within the budget", () =>
  withBudgetApp({ RATE_LIMIT_EXEMPT: "203.0.113.0/24" }, async (t, gitlab) => {
    // Four other networks have asked lately: a share would be one poll of the window's four.
    const others = await flowsFromManyNetworks(t, 4);
    await pollAll(t, gitlab, others);
    t.clock.advance(1000);
    const office: { ip: string; flowState: string }[] = [];
    for (let i = 1; i <= 6; i++) {
      const ip = `203.0.113.${i}`;
      office.push({ ip, flowState: await startFrom(t, ip) });
    }
    // The office polls first in a window: it may take the whole open part, never more.
    assert.equal(await pollAll(t, gitlab, office), 4);
    assert.equal(await pollAll(t, gitlab, others), 0, "the window is spent");
  }));
