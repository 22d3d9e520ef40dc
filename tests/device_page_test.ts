/**
 * `GET /device`, the user's side of our device authorization endpoint (issue 36), over real
 * HTTP against the real app: entering a code (any case, with or without the dash), what the
 * page shows before the user signs in, the binding of a code to the first browser, and the
 * wrong-code limit per client address (RATE_LIMIT_DEVICE).
 */

import assert from "node:assert/strict";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { userCodeHash } from "../src/store/keys.ts";
import { CookieJar, TEST_BASE, type TestApp, withApp } from "./_helpers.ts";

const CLIENT_IP = "203.0.113.9";
const OTHER_IP = "198.51.100.7";

function peer(hostname: string): Deno.ServeHandlerInfo {
  return {
    remoteAddr: { transport: "tcp", hostname, port: 1234 },
  } as unknown as Deno.ServeHandlerInfo;
}

async function startCode(t: TestApp, clientId: string): Promise<string> {
  const response = await t.app(
    new Request(`${TEST_BASE}/device_authorization`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ client_id: clientId }),
    }),
  );
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body.user_code;
}

async function registered(t: TestApp, name: string): Promise<string> {
  const response = await t.app(
    new Request(`${TEST_BASE}/register`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_name: name, grant_types: [DEVICE_CODE_GRANT_TYPE] }),
    }),
  );
  return (await response.json()).client_id;
}

function open(
  t: TestApp,
  query: string,
  jar = new CookieJar(),
  ip = CLIENT_IP,
): Promise<Response> {
  return t.app(new Request(`${TEST_BASE}/device${query}`, { headers: jar.headers() }), peer(ip));
}

Deno.test("device page: a form to enter the code, without script", async () => {
  await withApp(async (t) => {
    const response = await open(t, "");
    const html = await response.text();
    assert.equal(response.status, 200);
    assert.match(html, /<form method="get" action="http:\/\/auth\.test\/device">/);
    assert.match(html, /name="user_code"/);
    assert.doesNotMatch(html, /<script/);
    const csp = response.headers.get("content-security-policy") ?? "";
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /form-action http:\/\/auth\.test/);
  });
});

Deno.test("device page: the code in any case, with or without the dash, shows client, access and the warning", async () => {
  await withApp(async (t) => {
    const clientId = await registered(t, "build-box agent");
    const userCode = await startCode(t, clientId);
    for (const typed of [userCode, userCode.toLowerCase(), userCode.replace("-", "")]) {
      const jar = new CookieJar();
      const response = await open(t, `?user_code=${encodeURIComponent(typed)}`, jar);
      const html = await response.text();
      if (typed !== userCode) {
        // The first browser bound the code: the others are told it is in use.
        assert.equal(response.status, 409, html);
        assert.doesNotMatch(html, /build-box agent/);
        continue;
      }
      assert.equal(response.status, 200, html);
      assert.match(html, new RegExp(`<code>${userCode}</code>`));
      assert.match(html, /<strong><bdi>build-box agent<\/bdi><\/strong>/);
      assert.match(html, /name given by the application, not verified/);
      assert.match(html, /to use its tools and read its resources/);
      assert.match(html, /http:\/\/auth\.test\/mcp/);
      assert.match(
        html,
        /id="device-warning"[^>]*>Continue only if you started this sign-in yourself, on a device you own/,
      );
      jar.store(response);
      // The same browser again, the code typed otherwise: still its code.
      const again = await open(t, `?user_code=${userCode.toLowerCase().replace("-", "")}`, jar);
      assert.equal(again.status, 200, await again.text());
    }
  });
});

Deno.test("device page: a second browser gets 'in use' and no client", async () => {
  await withApp(async (t) => {
    const userCode = await startCode(t, await registered(t, "build-box agent"));
    const first = await open(t, `?user_code=${userCode}`);
    assert.equal(first.status, 200);
    assert.ok(first.headers.getSetCookie().length > 0);
    await first.body?.cancel();
    const second = await open(t, `?user_code=${userCode}`);
    const html = await second.text();
    assert.equal(second.status, 409);
    assert.match(html, /already been entered in another browser/);
    assert.doesNotMatch(html, /build-box agent/);
    assert.doesNotMatch(html, /user-code/);
  });
});

Deno.test("device page: an unknown client is shown as unknown", async () => {
  await withApp(async (t) => {
    const userCode = await startCode(t, "never-registered");
    const html = await (await open(t, `?user_code=${userCode}`)).text();
    assert.match(html, /id="client-unknown"/);
    assert.match(html, /<code><bdi>never-registered<\/bdi><\/code>/);
  });
});

Deno.test("device page: 20 wrong codes per address, then 429 with Retry-After for any code", async () => {
  await withApp(async (t) => {
    const userCode = await startCode(t, await registered(t, "agent"));
    for (let i = 0; i < 20; i++) {
      const wrong = await open(t, `?user_code=BBBB-BBB${"CDFGHJKLMNPQRSTVWXZB"[i]}`);
      assert.equal(wrong.status, 400, `wrong code ${i + 1}`);
      await wrong.body?.cancel();
    }
    const refused = await open(t, "?user_code=not-a-code");
    assert.equal(refused.status, 429);
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
    await refused.body?.cancel();
    const right = await open(t, `?user_code=${userCode}`);
    assert.equal(right.status, 429, "a right code from that address too");
    assert.ok(Number(right.headers.get("retry-after")) > 0);
    await right.body?.cancel();
    const elsewhere = await open(t, `?user_code=${userCode}`, new CookieJar(), OTHER_IP);
    assert.equal(elsewhere.status, 200);
    await elsewhere.body?.cancel();
    t.clock.advance(600_000);
    const later = await open(t, "?user_code=not-a-code");
    assert.equal(later.status, 400);
    await later.body?.cancel();
  });
});

Deno.test("device page: a guess through the device flow's return (?code=, the user code's hash) is a wrong code too", async () => {
  await withApp(async (t) => {
    const userCode = await startCode(t, await registered(t, "agent"));
    // `code` names an authorization by its user code's hash, which anyone can compute.
    for (let i = 0; i < 20; i++) {
      const guess = userCodeHash(`BBBB-BBB${"CDFGHJKLMNPQRSTVWXZB"[i]}`);
      const wrong = await open(t, `?code=${guess}`);
      assert.equal(wrong.status, 400, `wrong code ${i + 1}`);
      await wrong.body?.cancel();
    }
    const right = await open(t, `?user_code=${userCode}`);
    assert.equal(right.status, 429, "past the limit, a right code from that address too");
    await right.body?.cancel();
  });
});

Deno.test("device page: 404 when DEVICE_AUTHORIZATION=off", async () => {
  await withApp(async (t) => {
    const response = await open(t, "?user_code=BBBB-BBBB");
    assert.equal(response.status, 404);
    await response.body?.cancel();
  }, { env: { DEVICE_AUTHORIZATION: "off" } });
});

Deno.test("device page: wrong codes count a NAT64 client as its IPv4 address; RATE_LIMIT_EXEMPT's office is not counted", async () => {
  await withApp(async (t) => {
    const wrongFrom = async (ip: string) => {
      const answer = await open(t, "?user_code=BBBB-BBBB", new CookieJar(), ip);
      await answer.body?.cancel();
      return answer.status;
    };
    assert.equal(await wrongFrom(`64:ff9b::${OTHER_IP}`), 400);
    assert.equal(await wrongFrom(`64:ff9b:1:2::${OTHER_IP}`), 400);
    assert.equal(await wrongFrom(OTHER_IP), 429, "one client, however it arrives");
    assert.equal(await wrongFrom("64:ff9b::192.0.2.1"), 400, "another client of the translator");
    for (let i = 0; i < 5; i++) assert.equal(await wrongFrom(CLIENT_IP), 400, "the office");
  }, { env: { RATE_LIMIT_DEVICE: "2/600", RATE_LIMIT_EXEMPT: CLIENT_IP } });
});

Deno.test("device page: wrong codes count the network too, 5× RATE_LIMIT_DEVICE per IPv4 /24 or IPv6 /56", async () => {
  await withApp(async (t) => {
    const userCode = await startCode(t, await registered(t, "agent"));
    const statusFrom = async (ip: string, code = "BBBB-BBBB") => {
      const answer = await open(t, `?user_code=${code}`, new CookieJar(), ip);
      await answer.body?.cancel();
      return answer.status;
    };
    // Five /64s of one /56, two wrong codes each (each address's own limit): ten in the /56.
    for (let net = 1; net <= 5; net++) {
      for (let i = 0; i < 2; i++) assert.equal(await statusFrom(`2001:db8:0:${net}::1`), 400);
    }
    assert.equal(await statusFrom("2001:db8:0:6::1"), 429, "a sixth /64 of the same /56");
    assert.equal(await statusFrom("2001:db8:0:6::1", userCode), 429, "a right code too");
    assert.equal(await statusFrom("2001:db8:0:100::1"), 400, "the next /56");
    for (let host = 1; host <= 5; host++) {
      for (let i = 0; i < 2; i++) assert.equal(await statusFrom(`198.51.100.${host}`), 400);
    }
    assert.equal(await statusFrom("198.51.100.6"), 429, "a sixth address of the same /24");
    assert.equal(await statusFrom("198.51.101.1"), 400, "the next /24");
    t.clock.advance(600_000);
    assert.equal(await statusFrom("2001:db8:0:6::1"), 400, "the next window");
  }, { env: { RATE_LIMIT_DEVICE: "2/600" } });
});

/** The app served over HTTP on loopback, limited as any client (RATE_LIMIT_LOOPBACK=limit). */
async function withServedApp(
  env: Record<string, string>,
  fn: (t: TestApp, url: string) => Promise<void>,
): Promise<void> {
  await withApp(async (t) => {
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
    try {
      await fn(t, `http://127.0.0.1:${server.addr.port}`);
    } finally {
      await server.shutdown();
    }
  }, { env: { RATE_LIMIT_LOOPBACK: "limit", ...env } });
}

/**
 * GET `paths` of `url` at once, as a guesser with its connections open does: every connection
 * is opened first, then every request is sent. The statuses, in the order of `paths`.
 */
async function burst(url: string, paths: string[]): Promise<number[]> {
  const { hostname, port } = new URL(url);
  const connections = await Promise.all(
    paths.map(() => Deno.connect({ hostname, port: Number(port) })),
  );
  const encoder = new TextEncoder();
  const requests = paths.map((path) =>
    encoder.encode(`GET ${path} HTTP/1.1\r\nHost: ${hostname}\r\nConnection: close\r\n\r\n`)
  );
  await Promise.all(connections.map((connection, i) => connection.write(requests[i])));
  return await Promise.all(connections.map(async (connection) => {
    const answer = await new Response(connection.readable).text();
    return Number(answer.match(/^HTTP\/1\.1 (\d{3})/)?.[1]);
  }));
}

Deno.test("device page: a burst of parallel guesses is looked up only while the address has wrong codes left", async () => {
  await withServedApp({ RATE_LIMIT_DEVICE: "3/600" }, async (t, url) => {
    const clientId = await registered(t, "agent");
    const right = await Promise.all(Array.from({ length: 4 }, () => startCode(t, clientId)));
    // Two wrong codes one by one: one is left.
    assert.deepEqual(await burst(url, ["/device?user_code=BBBB-BBBB"]), [400]);
    assert.deepEqual(await burst(url, ["/device?user_code=BBBB-BBBC"]), [400]);
    const letters = "CDFGHJKLMNPQRSTVWXZ";
    const wrong = Array.from(
      { length: 120 },
      (_, i) => `BBBB-BD${letters[i % 19]}${letters[i % 6]}`,
    );
    const statuses = await burst(
      url,
      [...wrong, ...right].map((code) => `/device?user_code=${code}`),
    );
    // Counted only after a wrong lookup, all 124 were looked up and the right codes found.
    const found = statuses.slice(wrong.length).filter((status) => status === 200).length;
    assert.ok(found < right.length, `${found} of ${right.length} right codes found in the burst`);
    assert.ok(statuses.filter((status) => status === 400).length <= 1, "one wrong code was left");
    assert.ok(statuses.every((status) => [200, 400, 429].includes(status)), String(statuses));
  });
});

Deno.test("device page: a found code gives its try back; a right code past the limit is 429 all the same", async () => {
  await withServedApp({ RATE_LIMIT_DEVICE: "2/600" }, async (t, url) => {
    const clientId = await registered(t, "agent");
    const statusOf = async (code: string) => {
      const response = await fetch(`${url}/device?user_code=${code}`);
      await response.body?.cancel();
      return response.status;
    };
    for (let i = 0; i < 5; i++) assert.equal(await statusOf(await startCode(t, clientId)), 200);
    assert.equal(await statusOf("BBBB-BBBB"), 400);
    assert.equal(await statusOf("BBBB-BBBC"), 400);
    assert.equal(await statusOf(await startCode(t, clientId)), 429);
  });
});

Deno.test("device page: a form's device or a link's code that cannot be a user code's hash is a wrong code, never a 500", async () => {
  await withServedApp({ RATE_LIMIT_DEVICE: "3/600" }, async (_t, url) => {
    // Longer than a storage key may be (2 KiB in Deno KV), shorter than a query may be.
    const long = "a".repeat(3000);
    const viaLink = await fetch(`${url}/device?code=${long}`);
    assert.equal(viaLink.status, 400, await viaLink.text());
    const viaForm = await fetch(`${url}/device`, {
      method: "POST",
      body: new URLSearchParams({ device: long, action: "approve", csrf_token: "x" }),
    });
    assert.equal(viaForm.status, 400, await viaForm.text());
    const again = await fetch(`${url}/device?code=${"b".repeat(43)}`);
    assert.equal(again.status, 400, "a third wrong code");
    await again.body?.cancel();
    const refused = await fetch(`${url}/device?code=${"c".repeat(43)}`);
    assert.equal(refused.status, 429, "the fourth: both long ones were counted");
    await refused.body?.cancel();
  });
});
