/**
 * Per-client-IP rate limits (not in the spec; see docs/security.md): over a limit the answer is 429
 * `temporarily_unavailable` with `Retry-After`, before any other work (GitLab is not called).
 * Counted per fixed window in KV, so the count is shared by every instance on one KV.
 */

import assert from "node:assert/strict";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { recordsOf } from "../src/store/keys.ts";
import { createApp, type FetchHandler } from "../src/app/app.ts";
import { createSecretBoxFromConfig } from "../src/secret_box.ts";
import { createStore } from "../src/store/mod.ts";
import {
  authorizeQuery,
  countRecords,
  flowDataFromPage,
  PKCE,
  TEST_BASE,
  TEST_SECRET,
  withEnv,
} from "./_helpers.ts";
import { spawnService } from "./_service.ts";
import { auditLines, type GatewayServer, startGateway, startScripted } from "./_gateway_mcp.ts";
import { FakeClock, issueTokens } from "./_helpers.ts";

const CLIENT = "203.0.113.9";
const OTHER = "198.51.100.7";

/** What Deno.serve hands the handler for a TCP peer. */
function peer(hostname: string): Deno.ServeHandlerInfo {
  return {
    remoteAddr: { transport: "tcp", hostname, port: 1234 },
  } as unknown as Deno.ServeHandlerInfo;
}

interface Answer {
  status: number;
  headers: Headers;
  body: string;
}

async function send(
  app: FetchHandler,
  ip: string | undefined,
  path: string,
  init: RequestInit = {},
): Promise<Answer> {
  const response = await app(
    new Request(`${TEST_BASE}${path}`, init),
    ip === undefined ? undefined : peer(ip),
  );
  return { status: response.status, headers: response.headers, body: await response.text() };
}

let authorizations = 0;

/** A distinct authorization request each time (an identical one would share the first's flow). */
function authorize(app: FetchHandler, ip: string | undefined, headers: HeadersInit = {}) {
  return send(app, ip, `/authorize?${authorizeQuery({ state: `s${++authorizations}` })}`, {
    headers,
  });
}

/** A 429 as rate limiting answers it; returns the Retry-After seconds. */
function assertLimited(answer: Answer): number {
  assert.equal(answer.status, 429, answer.body);
  const body = JSON.parse(answer.body);
  assert.deepEqual(Object.keys(body).sort(), ["error", "error_description"]);
  assert.equal(body.error, "temporarily_unavailable");
  assert.equal(typeof body.error_description, "string");
  assert.ok(body.error_description.length > 0);
  assert.match(answer.headers.get("content-type") ?? "", /application\/json/);
  const retryAfter = answer.headers.get("retry-after");
  assert.ok(retryAfter, "Retry-After is set");
  assert.match(retryAfter, /^\d+$/);
  return Number(retryAfter);
}

Deno.test("rate limit: the 4th /authorize of one IP under 3/600 → 429 with Retry-After, GitLab not called", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    for (let i = 1; i <= 3; i++) {
      assert.equal((await authorize(t.app, CLIENT)).status, 200, `request ${i}`);
    }
    assert.equal(t.upstream.calls.start, 3);
    const retryAfter = assertLimited(await authorize(t.app, CLIENT));
    assert.ok(retryAfter > 0 && retryAfter <= 600, String(retryAfter));
    assert.equal(t.upstream.calls.start, 3, "no device flow started for the limited request");
    // Still limited, Retry-After counting down with the clock.
    t.clock.advance(100_000);
    assert.equal(assertLimited(await authorize(t.app, CLIENT)), retryAfter - 100);
    assert.equal(t.upstream.calls.start, 3);
    assert.equal(await countRecords(t.kv, "flow"), 3);
  }));

Deno.test("rate limit: another IP is unaffected", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    for (let i = 0; i < 3; i++) await authorize(t.app, CLIENT);
    assertLimited(await authorize(t.app, CLIENT));
    for (let i = 1; i <= 3; i++) {
      assert.equal((await authorize(t.app, OTHER)).status, 200, `other IP request ${i}`);
    }
    assertLimited(await authorize(t.app, OTHER));
    // IPv6 clients are counted by their address too.
    assert.equal((await authorize(t.app, "2001:db8::5")).status, 200);
  }));

Deno.test("rate limit: the window resets when the clock passes it", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    for (let i = 0; i < 3; i++) await authorize(t.app, CLIENT);
    const retryAfter = assertLimited(await authorize(t.app, CLIENT));
    t.clock.advance(retryAfter * 1000 - 1001);
    assertLimited(await authorize(t.app, CLIENT));
    t.clock.advance(1001);
    for (let i = 1; i <= 3; i++) {
      assert.equal((await authorize(t.app, CLIENT)).status, 200, `new window, request ${i}`);
    }
    assertLimited(await authorize(t.app, CLIENT));
    assert.equal(t.upstream.calls.start, 6);
  }));

Deno.test("rate limit: `off` disables a limit", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "off", RATE_LIMIT_POLL: "off" }, async (t) => {
    for (let i = 0; i < 40; i++) {
      assert.equal((await authorize(t.app, CLIENT)).status, 200);
      assert.equal((await send(t.app, CLIENT, "/oauth/poll?flow_state=x")).status, 400);
    }
    assert.deepEqual(await recordsOf(t.kv, "rate"), [], "nothing is counted");
  }));

Deno.test("rate limit: loopback clients are exempt by default", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    for (const ip of ["127.0.0.1", "::1", "127.0.0.53", "::ffff:127.0.0.1", undefined]) {
      for (let i = 0; i < 6; i++) {
        assert.equal((await authorize(t.app, ip)).status, 200, `${ip} request ${i + 1}`);
      }
    }
    assert.deepEqual(await recordsOf(t.kv, "rate"), []);
  }));

Deno.test("rate limit: RATE_LIMIT_LOOPBACK=limit limits loopback clients too", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600", RATE_LIMIT_LOOPBACK: "limit" }, async (t) => {
    for (const ip of ["127.0.0.1", "::1"]) {
      for (let i = 0; i < 3; i++) assert.equal((await authorize(t.app, ip)).status, 200);
      assertLimited(await authorize(t.app, ip));
    }
    assert.equal(t.upstream.calls.start, 6);
  }));

/** TRUST_PROXY naming loopback and the private networks: a chain of internal proxies. */
const INTERNAL_PROXIES = "127.0.0.0/8,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16";

Deno.test("rate limit: TRUST_PROXY with a trusted peer → the right-most untrusted X-Forwarded-For entry is the client", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600", TRUST_PROXY: INTERNAL_PROXIES }, async (t) => {
    // The client sends whatever it likes on the left; our proxies append on the right.
    const forwarded = [
      `1.1.1.1, ${CLIENT}`,
      `8.8.8.8, 9.9.9.9, ${CLIENT}`,
      `${CLIENT}, 10.0.0.2`,
    ];
    for (const xff of forwarded) {
      assert.equal(
        (await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": xff })).status,
        200,
        xff,
      );
    }
    for (
      const xff of [`6.6.6.6, ${CLIENT}`, `${CLIENT}:4711, 172.16.0.9, 192.168.1.1`, CLIENT]
    ) {
      assertLimited(await authorize(t.app, "::1", { "X-Forwarded-For": xff }));
    }
    // A spoofed left-most entry naming another client does not make it that client, nor
    // does it charge that client.
    assert.equal(
      (await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": `${OTHER}` })).status,
      200,
    );
    assertLimited(
      await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": `${OTHER}, ${CLIENT}` }),
    );
    // Every entry trusted: the left-most is the client.
    for (let i = 0; i < 3; i++) {
      const xff = `10.9.9.9, 10.0.0.${i}`;
      assert.equal((await authorize(t.app, "10.0.0.1", { "X-Forwarded-For": xff })).status, 200);
    }
    assertLimited(await authorize(t.app, "10.0.0.1", { "X-Forwarded-For": "10.9.9.9" }));
    assert.equal(t.upstream.calls.start, 7);
  }));

Deno.test("rate limit: an X-Forwarded-For entry that is no address never hands the count to a client-chosen entry left of it, nor to the proxy", () =>
  withEnv(
    { RATE_LIMIT_AUTHORIZE: "3/600", TRUST_PROXY: "true", RATE_LIMIT_LOOPBACK: "limit" },
    async (t) => {
      const junk = "x".repeat(5000);
      // A proxy that wrote `unknown` (or junk) for its peer: the entries left of it were sent
      // by the client, so every such request is the one `unknown-client`.
      for (let i = 0; i < 3; i++) {
        const xff = `192.0.2.${i}, ${junk}, unknown`;
        assert.equal((await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": xff })).status, 200);
      }
      assertLimited(
        await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": `${CLIENT}, unknown` }),
      );
      // Junk alone: never a 500, and still that one client.
      for (const xff of [junk, "<script>", "999.1.2.3.4", `${"2001:db8::1:".repeat(300)}`]) {
        assertLimited(await authorize(t.app, "::1", { "X-Forwarded-For": xff }));
      }
      const counted = await recordsOf<number>(t.kv, "rate");
      assert.deepEqual(counted.map(({ key: [, , subject] }) => subject), ["unknown-client"]);
      // The proxies' own requests, and the address left of the junk, were not charged.
      assert.equal((await authorize(t.app, "::1")).status, 200);
      assert.equal(
        (await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": CLIENT })).status,
        200,
      );
      // One IPv6 client, however it is spelled.
      for (const spelling of ["2001:DB8::5", "[2001:db8::5]:443", "2001:db8::5"]) {
        const answer = await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": spelling });
        assert.equal(answer.status, 200, spelling);
      }
      assertLimited(await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": "2001:Db8::5" }));
    },
  ));

Deno.test("rate limit: TRUST_PROXY=true trusts loopback proxies only: a private-network peer's X-Forwarded-For is not believed", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600", TRUST_PROXY: "true" }, async (t) => {
    // Any host on the LAN (or a container next door) is not our proxy.
    for (let i = 0; i < 3; i++) {
      const xff = `192.0.2.${i + 1}`;
      assert.equal((await authorize(t.app, "10.0.0.7", { "X-Forwarded-For": xff })).status, 200);
    }
    assertLimited(await authorize(t.app, "10.0.0.7", { "X-Forwarded-For": "192.0.2.99" }));
    // Behind a loopback proxy, a private address it forwards for is a client like any other.
    for (let i = 0; i < 3; i++) {
      const xff = `${OTHER}, 10.0.0.8`;
      assert.equal((await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": xff })).status, 200);
    }
    assertLimited(await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": "10.0.0.8" }));
  }));

Deno.test("rate limit: TRUST_PROXY as CIDRs trusts exactly those proxies", () =>
  withEnv(
    { RATE_LIMIT_AUTHORIZE: "3/600", TRUST_PROXY: "10.1.0.0/16,fd00::/8" },
    async (t) => {
      for (const proxy of ["10.1.2.3", "fd00::7", "::ffff:10.1.9.9"]) {
        assert.equal(
          (await authorize(t.app, proxy, { "X-Forwarded-For": `6.6.6.6, ${CLIENT}` })).status,
          200,
          proxy,
        );
      }
      assertLimited(await authorize(t.app, "10.1.0.1", { "X-Forwarded-For": CLIENT }));
      // Outside the ranges (loopback too) the peer is the client, whatever it forwards.
      for (const peerIp of ["10.2.0.1", "127.0.0.1"]) {
        const answer = await authorize(t.app, peerIp, { "X-Forwarded-For": CLIENT });
        assert.equal(answer.status, 200, peerIp);
      }
    },
  ));

Deno.test("rate limit: one bucket per address however it is spelled (::FFFF:1.2.3.4, 0:0::1)", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    for (const spelling of [CLIENT, `::FFFF:${CLIENT}`, "0:0:0:0:0:ffff:cb00:7109"]) {
      assert.equal((await authorize(t.app, spelling)).status, 200, spelling);
    }
    assertLimited(await authorize(t.app, `::ffff:${CLIENT}`));
    // Loopback in any spelling is loopback (exempt by default).
    for (let i = 0; i < 5; i++) {
      for (
        const spelling of ["0:0::1", "0000:0000:0000:0000:0000:0000:0000:0001", "::ffff:127.0.0.2"]
      ) {
        assert.equal((await authorize(t.app, spelling)).status, 200, spelling);
      }
    }
  }));

Deno.test("rate limit: IPv6 clients are counted per /64, not per address", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    for (const address of ["2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "2001:DB8:1:2:abcd:1:2:3"]) {
      assert.equal((await authorize(t.app, address)).status, 200, address);
    }
    assertLimited(await authorize(t.app, "2001:db8:1:2:dead:beef:0:1"));
    // The next /64 is someone else.
    assert.equal((await authorize(t.app, "2001:db8:1:3::1")).status, 200);
    const subjects = (await recordsOf(t.kv, "rate")).map(({ key }) => key[2]);
    assert.deepEqual([...new Set(subjects)].sort(), ["2001:db8:1:2::/64", "2001:db8:1:3::/64"]);
  }));

Deno.test("rate limit: TRUST_PROXY but a public peer → the peer is the client, X-Forwarded-For ignored", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600", TRUST_PROXY: "true" }, async (t) => {
    for (let i = 0; i < 3; i++) {
      const xff = `10.0.0.${i}, 192.0.2.${i + 1}`;
      assert.equal((await authorize(t.app, CLIENT, { "X-Forwarded-For": xff })).status, 200);
    }
    assertLimited(await authorize(t.app, CLIENT, { "X-Forwarded-For": "192.0.2.200" }));
  }));

Deno.test("rate limit: without TRUST_PROXY the X-Forwarded-For header is ignored", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    // A public client cannot escape its limit by sending a header.
    for (let i = 0; i < 3; i++) {
      const xff = `192.0.2.${i + 1}`;
      assert.equal((await authorize(t.app, CLIENT, { "X-Forwarded-For": xff })).status, 200);
    }
    assertLimited(await authorize(t.app, CLIENT, { "X-Forwarded-For": "192.0.2.99" }));
    // A loopback peer stays exempt loopback whatever it claims to forward.
    for (let i = 0; i < 5; i++) {
      assert.equal(
        (await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": CLIENT })).status,
        200,
      );
    }
  }));

function postForm(
  app: FetchHandler,
  ip: string,
  path: string,
  form: Record<string, string>,
): Promise<Answer> {
  return send(app, ip, path, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form),
  });
}

function register(app: FetchHandler, ip: string, headers: HeadersInit = {}): Promise<Answer> {
  return send(app, ip, "/register", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:9999/callback"] }),
  });
}

Deno.test("rate limit: /oauth/poll has its own limit", () =>
  withEnv({ RATE_LIMIT_POLL: "2/60", RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    const page = await authorize(t.app, CLIENT);
    const { flowState } = flowDataFromPage(page.body);
    const pollPath = `/oauth/poll?flow_state=${encodeURIComponent(flowState)}`;
    assert.equal((await send(t.app, CLIENT, pollPath)).status, 200);
    t.clock.advance(5_000); // GitLab's interval
    assert.equal((await send(t.app, CLIENT, pollPath)).status, 200);
    assert.equal(t.upstream.calls.poll, 2);
    const retryAfter = assertLimited(await send(t.app, CLIENT, pollPath));
    assert.ok(retryAfter <= 60);
    assert.equal(t.upstream.calls.poll, 2, "GitLab not polled for the limited request");
    // The poll limit does not touch the authorize limit, nor another IP.
    assert.equal((await authorize(t.app, CLIENT)).status, 200);
    assert.equal((await send(t.app, OTHER, pollPath)).status, 200);
    t.clock.advance(60_000);
    assert.equal((await send(t.app, CLIENT, pollPath)).status, 200);
  }));

Deno.test("rate limit: /token and /revoke share the token limit", () =>
  withEnv({ RATE_LIMIT_TOKEN: "3/600" }, async (t) => {
    const refresh = { grant_type: "refresh_token", refresh_token: "unknown" };
    assert.equal((await postForm(t.app, CLIENT, "/token", refresh)).status, 400);
    assert.equal((await postForm(t.app, CLIENT, "/revoke", { token: "unknown" })).status, 200);
    assert.equal((await postForm(t.app, CLIENT, "/token", refresh)).status, 400);
    const limitedToken = await postForm(t.app, CLIENT, "/token", refresh);
    assertLimited(limitedToken);
    assert.equal(limitedToken.headers.get("access-control-allow-origin"), "*");
    assertLimited(await postForm(t.app, CLIENT, "/revoke", { token: "unknown" }));
    assert.equal(t.upstream.calls.revoke, 0);
    assert.equal((await postForm(t.app, OTHER, "/token", refresh)).status, 400);
  }));

Deno.test("rate limit: a limited /token does not spend the code it carries", () =>
  withEnv({ RATE_LIMIT_TOKEN: "1/600" }, async (t) => {
    const refresh = { grant_type: "refresh_token", refresh_token: "unknown" };
    assert.equal((await postForm(t.app, CLIENT, "/token", refresh)).status, 400);
    // A flow run from loopback (exempt), the code then presented by the limited client.
    const page = await authorize(t.app, undefined);
    const { flowState } = flowDataFromPage(page.body);
    t.upstream.approve();
    const done = JSON.parse(
      (await send(t.app, undefined, `/oauth/poll?flow_state=${flowState}`)).body,
    );
    assert.equal(done.status, "complete");
    const form = {
      grant_type: "authorization_code",
      code: done.code,
      code_verifier: PKCE.verifier,
      redirect_uri: "http://127.0.0.1:9999/callback",
    };
    assertLimited(await postForm(t.app, CLIENT, "/token", form));
    assert.equal((await postForm(t.app, OTHER, "/token", form)).status, 200);
  }));

Deno.test("rate limit: /register has its own limit", () =>
  withEnv({ RATE_LIMIT_REGISTER: "2/3600" }, async (t) => {
    assert.equal((await register(t.app, CLIENT)).status, 201);
    assert.equal((await register(t.app, CLIENT)).status, 201);
    const retryAfter = assertLimited(await register(t.app, CLIENT));
    assert.ok(retryAfter <= 3600);
    assert.equal(await countRecords(t.kv, "client"), 2);
    assert.equal((await register(t.app, OTHER)).status, 201);
  }));

Deno.test("rate limit: unlimited paths are never counted", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "1/600", RATE_LIMIT_TOKEN: "1/600" }, async (t) => {
    for (let i = 0; i < 5; i++) {
      assert.equal(
        (await send(t.app, CLIENT, "/.well-known/oauth-authorization-server")).status,
        200,
      );
      assert.equal((await send(t.app, CLIENT, "/nowhere")).status, 404);
    }
    assert.deepEqual(await recordsOf(t.kv, "rate"), []);
  }));

Deno.test("rate limit: a parallel burst of one IP gets exactly the limit through, no fewer", async (t) => {
  for (const [limit, parallel] of [[3, 20], [15, 20], [40, 60]]) {
    await t.step(
      `${parallel} at once under ${limit}/600`,
      () =>
        withEnv({ RATE_LIMIT_AUTHORIZE: `${limit}/600` }, async (t) => {
          const answers = await Promise.all(
            Array.from({ length: parallel }, () => authorize(t.app, CLIENT)),
          );
          const ok = answers.filter((answer) => answer.status === 200).length;
          assert.equal(ok, limit);
          for (const answer of answers.filter((answer) => answer.status !== 200)) {
            assertLimited(answer);
          }
          assert.equal(t.upstream.calls.start, limit);
        }),
    );
  }
});

Deno.test("rate limit: two apps on one KV share the count", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    // A second instance: its own store and app over the same KV (and clock).
    const store = createStore(t.kv, t.clock, createSecretBoxFromConfig(t.config));
    const second = createApp({ ...t.deps, store });
    assert.equal((await authorize(t.app, CLIENT)).status, 200);
    assert.equal((await authorize(second, CLIENT)).status, 200);
    assert.equal((await authorize(t.app, CLIENT)).status, 200);
    assertLimited(await authorize(second, CLIENT));
    assertLimited(await authorize(t.app, CLIENT));
    assert.equal((await authorize(second, OTHER)).status, 200);
  }));

Deno.test("rate limit: two service processes on one KV file share the count", async () => {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir({ prefix: "rate-limit-" });
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "rate-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/kv.sqlite`,
    RATE_LIMIT_AUTHORIZE: "3/600",
    RATE_LIMIT_REGISTER: "10/3600",
    // The test talks to the processes over loopback.
    RATE_LIMIT_LOOPBACK: "limit",
  };
  const first = await spawnService(env);
  const second = await spawnService(env);
  try {
    const get = async (base: string) => {
      const response = await fetch(
        `${base}/authorize?${authorizeQuery({ state: `s${++authorizations}` })}`,
      );
      return { status: response.status, headers: response.headers, body: await response.text() };
    };
    assert.equal((await get(first.url)).status, 200);
    assert.equal((await get(second.url)).status, 200);
    assert.equal((await get(first.url)).status, 200);
    assertLimited(await get(second.url));
    assertLimited(await get(first.url));
    assert.equal(gitlab.calls.authorizeDevice, 3, "GitLab saw only the allowed requests");

    // A parallel burst over both processes: the register limit (10/3600) lets exactly 10 in.
    const answers = await Promise.all(Array.from({ length: 20 }, async (_, i) => {
      const response = await fetch(`${[first, second][i % 2].url}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:9999/callback"] }),
      });
      return { status: response.status, headers: response.headers, body: await response.text() };
    }));
    assert.equal(answers.filter((answer) => answer.status === 201).length, 10);
    for (const answer of answers.filter((answer) => answer.status !== 201)) assertLimited(answer);
  } finally {
    await first.stop();
    await second.stop();
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/** The subjects the rate limits counted, each once, sorted. */
async function countedSubjects(t: { kv: Deno.Kv }): Promise<string[]> {
  const subjects = (await recordsOf(t.kv, "rate")).map(({ key }) => String(key[2]));
  return [...new Set(subjects)].sort();
}

Deno.test("rate limit: a NAT64 client (64:ff9b::/96, a /96 of 64:ff9b:1::/48) counts as the IPv4 address it embeds", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600" }, async (t) => {
    // One IPv4 client reached through translators, in three spellings, then directly: one bucket.
    for (
      const address of [`64:ff9b::${CLIENT}`, "64:FF9B::CB00:7109", `64:ff9b:1:ab:cd::${CLIENT}`]
    ) {
      assert.equal((await authorize(t.app, address)).status, 200, address);
    }
    assertLimited(await authorize(t.app, CLIENT));
    // The translator's other IPv4 clients are other clients, no longer its one /64.
    for (let i = 1; i <= 3; i++) {
      assert.equal((await authorize(t.app, `64:ff9b::${OTHER}`)).status, 200, `request ${i}`);
      assert.equal((await authorize(t.app, `64:ff9b::192.0.2.${i}`)).status, 200);
    }
    assertLimited(await authorize(t.app, `64:ff9b:1::${OTHER}`));
    // Outside the /96 an address is IPv6 as before, counted by its /64: a host there cannot
    // pass for many IPv4 clients.
    for (const address of ["64:ff9b::1:cb00:7109", "64:ff9b::2:c633:6407", "64:ff9b::ffff:0:1"]) {
      assert.equal((await authorize(t.app, address)).status, 200, address);
    }
    assertLimited(await authorize(t.app, "64:ff9b::3:102:304"));
    // An embedded loopback address is no local tool: counted (RATE_LIMIT_LOOPBACK=exempt is for
    // loopback itself).
    for (let i = 0; i < 3; i++) {
      assert.equal((await authorize(t.app, "64:ff9b::127.0.0.1")).status, 200);
    }
    assertLimited(await authorize(t.app, "64:ff9b::127.0.0.1"));
    assert.deepEqual(
      await countedSubjects(t),
      [
        "127.0.0.1",
        "192.0.2.1",
        "192.0.2.2",
        "192.0.2.3",
        OTHER,
        CLIENT,
        "64:ff9b::/64",
      ].sort(),
    );
  }));

Deno.test("rate limit: a trusted proxy forwarding no address (`unknown`, `0x01020304`, `1.2.3`) is one `unknown-client`, never the exempt proxy", () =>
  withEnv({ RATE_LIMIT_AUTHORIZE: "3/600", TRUST_PROXY: "true" }, async (t) => {
    for (const xff of ["unknown", "0x01020304", "1.2.3"]) {
      assert.equal((await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": xff })).status, 200);
    }
    // Through another loopback proxy, with an address the client chose left of the junk.
    assertLimited(await authorize(t.app, "::1", { "X-Forwarded-For": `${CLIENT}, unknown` }));
    assertLimited(await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": "_hidden" }));
    assert.deepEqual(await countedSubjects(t), ["unknown-client"]);
    // The clients the proxy does name, and the proxy itself (loopback, exempt), are untouched.
    assert.equal((await authorize(t.app, "127.0.0.1", { "X-Forwarded-For": CLIENT })).status, 200);
    for (let i = 0; i < 5; i++) assert.equal((await authorize(t.app, "127.0.0.1")).status, 200);
  }));

Deno.test("RATE_LIMIT_EXEMPT: an office's egress (IPv4, IPv6, through NAT64) is never limited, in any per-address bucket; its neighbours are", () =>
  withEnv(
    {
      RATE_LIMIT_REGISTER: "2/3600",
      RATE_LIMIT_AUTHORIZE: "2/600",
      RATE_LIMIT_TOKEN: "2/600",
      RATE_LIMIT_POLL: "2/60",
      RATE_LIMIT_EXEMPT: "203.0.113.0/28, 2001:db8:7::/48",
    },
    async (t) => {
      const refresh = { grant_type: "refresh_token", refresh_token: "unknown" };
      // The 21st developer behind the office's address registers like the first.
      for (const office of [CLIENT, "2001:db8:7:1::5", `64:ff9b::${CLIENT}`]) {
        for (let i = 1; i <= 25; i++) {
          assert.equal((await register(t.app, office)).status, 201, `${office} #${i}`);
        }
        for (let i = 0; i < 5; i++) {
          assert.equal((await authorize(t.app, office)).status, 200);
          assert.equal((await send(t.app, office, "/oauth/poll?flow_state=x")).status, 400);
          assert.equal((await postForm(t.app, office, "/token", refresh)).status, 400);
          assert.equal((await postForm(t.app, office, "/revoke", { token: "x" })).status, 200);
        }
      }
      assert.deepEqual(await countedSubjects(t), [], "the office is not even counted");
      // Next door (outside the /28, outside the /48) is limited as ever.
      for (const neighbour of ["203.0.113.16", "2001:db8:8::5"]) {
        for (let i = 0; i < 2; i++) assert.equal((await register(t.app, neighbour)).status, 201);
        assertLimited(await register(t.app, neighbour));
      }
    },
  ));

Deno.test("RATE_LIMIT_EXEMPT: only what a trusted proxy saw makes a client exempt; a claim of the client's own, or junk past an exempt proxy, is counted", () =>
  withEnv(
    {
      RATE_LIMIT_REGISTER: "2/3600",
      TRUST_PROXY: "10.0.0.0/8",
      RATE_LIMIT_EXEMPT: `10.0.0.0/8,${CLIENT}`,
    },
    async (t) => {
      const tries = async (ip: string, xff: string) => {
        for (let i = 0; i < 2; i++) {
          const answer = await register(t.app, ip, { "X-Forwarded-For": xff });
          assert.equal(answer.status, 201, `${ip} ${xff}`);
        }
        assertLimited(await register(t.app, ip, { "X-Forwarded-For": xff }));
      };
      // A peer that is no trusted proxy claiming to forward for the office: it is itself.
      await tries(OTHER, CLIENT);
      // Through the proxy, the office named left of the client's real address.
      await tries("10.0.0.2", `${CLIENT}, 198.51.100.8`);
      // The proxy (exempt itself) writing what is no address: `unknown-client`, counted.
      await tries("10.0.0.2", `${CLIENT}, unknown`);
      // The proxy forwarding for the office, and the proxy's own requests: exempt.
      for (let i = 0; i < 5; i++) {
        const viaProxy = await register(t.app, "10.0.0.2", {
          "X-Forwarded-For": `198.51.100.66, ${CLIENT}`,
        });
        assert.equal(viaProxy.status, 201);
        assert.equal((await register(t.app, "10.0.0.3")).status, 201);
      }
    },
  ));

Deno.test("RATE_LIMIT_EXEMPT, NAT64 and unknown-client over real HTTP, behind a loopback proxy", async () => {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir({ prefix: "rate-exempt-" });
  const service = await spawnService({
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "exempt-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/kv.sqlite`,
    BASE_URL: "https://auth.example.com",
    TRUST_PROXY: "true",
    RATE_LIMIT_REGISTER: "2/3600",
    RATE_LIMIT_EXEMPT: "203.0.113.7",
  });
  try {
    const registerAs = async (xff: string) => {
      const response = await fetch(`${service.url}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Forwarded-For": xff },
        body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:9999/callback"] }),
      });
      return { status: response.status, headers: response.headers, body: await response.text() };
    };
    for (const office of ["203.0.113.7", "64:ff9b::203.0.113.7"]) {
      for (let i = 0; i < 4; i++) assert.equal((await registerAs(office)).status, 201, office);
    }
    // Through a translator and directly: one client.
    assert.equal((await registerAs("64:ff9b::198.51.100.7")).status, 201);
    assert.equal((await registerAs("64:ff9b:1::198.51.100.7")).status, 201);
    assertLimited(await registerAs("198.51.100.7"));
    // Not an address: all one client, not the loopback proxy.
    assert.equal((await registerAs("unknown")).status, 201);
    assert.equal((await registerAs("0x01020304")).status, 201);
    assertLimited(await registerAs("1.2.3"));
  } finally {
    await service.stop();
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/** A JSON-RPC POST to a gateway served on loopback, with `token` as the bearer. */
async function mcpPost(g: GatewayServer, token: string, body: unknown): Promise<Answer> {
  const response = await fetch(g.mcpUrl, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
    },
    body: JSON.stringify(body),
  });
  return { status: response.status, headers: response.headers, body: await response.text() };
}

const PING = { jsonrpc: "2.0", id: 1, method: "ping" };

Deno.test("RATE_LIMIT_MCP: messages per sign-in session, shared by two instances, loopback too; 429 with Retry-After", async () => {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const clock = new FakeClock(Date.parse("2026-01-01T00:00:15Z"));
  const upstream = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  // RATE_LIMIT_LOOPBACK=exempt (the default) exempts loopback from the per-address limits only.
  const env = { RATE_LIMIT_MCP: "4/60" };
  const one = await startGateway(upstream.url, { env, kvPath, clock });
  const two = await startGateway(upstream.url, { env, kvPath, clock, signIn: false });
  try {
    const ada = one.accessToken;
    assert.equal((await mcpPost(one, ada, PING)).status, 200);
    assert.equal((await mcpPost(two, ada, PING)).status, 200);
    // A batch counts each of its messages.
    assert.equal((await mcpPost(one, ada, [PING, { ...PING, id: 2 }])).status, 200);
    const retryAfter = assertLimited(await mcpPost(two, ada, PING));
    assert.equal(retryAfter, 45, "until the window (a minute) ends");
    assertLimited(await mcpPost(one, ada, PING));
    assert.equal(upstream.requests.length, 3, "the MCP server saw only the allowed requests");

    const refused = auditLines(two.lines).filter((line) => line.status === 429);
    assert.equal(refused.length, 1, "a 429 is audited");
    assert.equal(refused[0].error, "temporarily_unavailable");
    assert.equal(refused[0].username, "ada");

    // Another session of the same user has its own count.
    const other = await issueTokens(one.t);
    assert.equal((await mcpPost(two, other.access_token, PING)).status, 200);

    clock.advance(45_000);
    assert.equal((await mcpPost(two, ada, PING)).status, 200, "the next window");
  } finally {
    await one.close();
    await two.close();
    await upstream.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("RATE_LIMIT_MCP: a busy session claims its allowance from the store a slice at a time", async () => {
  const clock = new FakeClock();
  const upstream = startScripted(() => Response.json({ jsonrpc: "2.0", id: 1, result: {} }));
  const g = await startGateway(upstream.url, { env: { RATE_LIMIT_MCP: "100/60" }, clock });
  try {
    const counted = async () => {
      const [entry] = await recordsOf<number>(g.t.kv, "rate");
      return entry?.value;
    };
    assert.equal((await mcpPost(g, g.accessToken, PING)).status, 200);
    assert.equal(await counted(), 5, "one slice: a twentieth of the limit");
    for (let i = 0; i < 4; i++) await mcpPost(g, g.accessToken, PING);
    assert.equal(await counted(), 5, "spent in memory");
    for (let i = 0; i < 95; i++) assert.equal((await mcpPost(g, g.accessToken, PING)).status, 200);
    assert.equal(await counted(), 100);
    assertLimited(await mcpPost(g, g.accessToken, PING));
  } finally {
    await g.close();
    await upstream.close();
  }
});
