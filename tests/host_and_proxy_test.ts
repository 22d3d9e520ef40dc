/**
 * The trust boundary of the request's own description: a `Host` header (or a trusted proxy's
 * `X-Forwarded-Host`/`-Proto`) that is not what it must be is a 400, never a 500 or a
 * different route; metadata that follows the Host is never cached; TRUST_PROXY needs BASE_URL.
 */

import assert from "node:assert/strict";
import { assertError, TEST_BASE, TEST_SECRET, withEnv } from "./_helpers.ts";
import { rawRequest, spawnService } from "./_service.ts";

const BAD_HOSTS = [
  "x/mcp?",
  "a:99999",
  "[::1",
  "a b",
  "a@b",
  "a:",
  "a:0",
  "[::1]x",
  "a:1:2",
  "1.2.3.4.5",
  "[fe80::1%25eth0]",
];

/** Waits until the service has printed `count` lines (its stdout arrives on its own time). */
async function linesAfter(logs: string[], count: number): Promise<string[]> {
  for (let i = 0; i < 200 && logs.length < count; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return logs;
}

Deno.test("host: a Host that is not host[:port] → 400 invalid_request JSON over real HTTP, one log line, no stack, never another route", async () => {
  const service = await spawnService({
    KV_PATH: ":memory:",
    GITLAB_URL: "http://127.0.0.1:9",
    GITLAB_CLIENT_ID: "gitlab-app-id",
    JWT_SECRET: TEST_SECRET,
    MCP_UPSTREAM_URL: "http://127.0.0.1:9/mcp",
  });
  try {
    const port = new URL(service.url).port;
    const good = await rawRequest(service.url, [
      "GET /healthz HTTP/1.1",
      `Host: 127.0.0.1:${port}`,
    ]);
    assert.equal(good.status, 200, good.body);
    // Request lines are written on the event loop's next turn, after the answer.
    for (let i = 0; i < 200 && !service.logs.some((l) => l.includes('"status":200')); i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    for (const host of BAD_HOSTS) {
      const before = service.logs.length;
      const answer = await rawRequest(service.url, ["GET /healthz HTTP/1.1", `Host: ${host}`]);
      assert.equal(answer.status, 400, `${host}: ${answer.body}`);
      assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
      const body = JSON.parse(answer.body);
      assert.equal(body.error, "invalid_request", host);
      assert.match(body.error_description, /host/i);
      const logs = await linesAfter(service.logs, before + 1);
      const added = logs.slice(before);
      assert.equal(added.length, 1, `${host}: ${added.join("\n")}`);
      const line = JSON.parse(added[0]);
      assert.equal(line.message, "request");
      assert.equal(line.status, 400);
    }
    assert.ok(
      !service.logs.some((line) => /^\s+at |Error:|panic/.test(line)),
      service.logs.join("\n"),
    );
  } finally {
    await service.stop();
  }
});

Deno.test("host: a trusted proxy's X-Forwarded-Host or -Proto that is malformed → 400; its right-most value counts", () =>
  withEnv({ TRUST_PROXY: "true" }, async (t) => {
    const healthz = (headers: Record<string, string>) =>
      t.app(new Request(`${TEST_BASE}/healthz`, { headers }));
    for (const host of BAD_HOSTS) {
      await assertError(await healthz({ "X-Forwarded-Host": host }), 400, "invalid_request");
      await assertError(
        await healthz({ "X-Forwarded-Host": `good.example, ${host}` }),
        400,
        "invalid_request",
      );
    }
    for (const proto of ["ftp", "javascript", "", "https, "]) {
      await assertError(await healthz({ "X-Forwarded-Proto": proto }), 400, "invalid_request");
    }
    // What a client put on the left is not the proxy's value.
    const ok = await healthz({
      "X-Forwarded-Host": "a b, auth.example.com:443",
      "X-Forwarded-Proto": "gopher, https",
    });
    assert.equal(ok.status, 200, await ok.text());
    // From a peer that is not a trusted proxy the headers are not read at all.
    const untrusted = await t.app(
      new Request(`${TEST_BASE}/healthz`, { headers: { "X-Forwarded-Host": "a b" } }),
      { remoteAddr: { transport: "tcp", hostname: "203.0.113.9", port: 1 } } as never,
    );
    assert.equal(untrusted.status, 200, await untrusted.text());
  }));

Deno.test("host: without BASE_URL the metadata follows the Host, so it is never cached (no-store); with BASE_URL max-age=300", async () => {
  const paths = [
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-protected-resource",
  ];
  await withEnv({ BASE_URL: "" }, async (t) => {
    for (const path of paths) {
      const response = await t.app(new Request(`http://other.example${path}`));
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("cache-control"), "no-store", path);
      assert.match(JSON.stringify(await response.json()), /other\.example/);
    }
  });
  await withEnv({}, async (t) => {
    for (const path of paths) {
      const response = await t.app(new Request(`${TEST_BASE}${path}`));
      assert.equal(response.headers.get("cache-control"), "public, max-age=300", path);
      await response.body?.cancel();
    }
  });
});

Deno.test("host: TRUST_PROXY without BASE_URL refuses to start, naming BASE_URL in one line", async () => {
  for (const trust of ["true", "10.0.0.0/8"]) {
    const started = await spawnService({ KV_PATH: ":memory:", TRUST_PROXY: trust }).then(
      (service) => service,
      (error: Error) => error,
    );
    if (!(started instanceof Error)) {
      await started.stop();
      assert.fail(`TRUST_PROXY=${trust} without BASE_URL started`);
    }
    assert.match(started.message, /service exited with [1-9]/);
    const lines = started.message.split("\n").slice(1).filter((line) => line.trim());
    assert.equal(lines.length, 1, started.message);
    assert.match(lines[0], /TRUST_PROXY.*BASE_URL/);
  }
});
