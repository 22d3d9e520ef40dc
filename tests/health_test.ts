import assert from "node:assert/strict";
import { makeTestApp, TEST_BASE, TEST_SECRET } from "./_helpers.ts";

Deno.test("GET /healthz (liveness): 200 while the process serves, even unconfigured", async () => {
  for (const configured of [true, false]) {
    const t = await makeTestApp({ configured });
    try {
      const response = await t.app(new Request(`${TEST_BASE}/healthz`));
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("cache-control"), "no-store");
      assert.deepEqual(await response.json(), { status: "ok" });
    } finally {
      t.close();
    }
  }
});

Deno.test("GET /healthz (liveness): 200 even when KV is unreachable", async () => {
  const t = await makeTestApp();
  t.close();
  const response = await t.app(new Request(`${TEST_BASE}/healthz`));
  assert.equal(response.status, 200);
  await response.body?.cancel();
});

Deno.test("GET /readyz: 200 with KV reachable and OAuth configured, no secrets", async () => {
  const t = await makeTestApp();
  try {
    const response = await t.app(new Request(`${TEST_BASE}/readyz`));
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.deepEqual(JSON.parse(text), {
      status: "ok",
      checks: { kv: "ok", configuration: "ok" },
    });
    assert.doesNotMatch(text, new RegExp(TEST_SECRET));
    assert.doesNotMatch(text, /gitlab-app-id/);
  } finally {
    t.close();
  }
});

Deno.test("GET /readyz: 503 naming the configuration when OAuth is not configured", async () => {
  const t = await makeTestApp({ configured: false });
  try {
    const response = await t.app(new Request(`${TEST_BASE}/readyz`));
    assert.equal(response.status, 503);
    assert.equal(response.headers.get("cache-control"), "no-store");
    assert.deepEqual(await response.json(), {
      status: "unavailable",
      checks: { kv: "ok", configuration: "missing" },
    });
  } finally {
    t.close();
  }
});

Deno.test("GET /readyz: 503 naming KV when it is unreachable", async () => {
  const t = await makeTestApp();
  t.close();
  const response = await t.app(new Request(`${TEST_BASE}/readyz`));
  assert.equal(response.status, 503);
  assert.deepEqual((await response.json()).checks, { kv: "unreachable", configuration: "ok" });
});

Deno.test("GET /: the service documentation page named by metadata", async () => {
  const t = await makeTestApp();
  try {
    const metadata = await (await t.app(
      new Request(`${TEST_BASE}/.well-known/oauth-authorization-server`),
    )).json();
    const response = await t.app(new Request(metadata.service_documentation));
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /text\/html/);
    assert.match(response.headers.get("content-security-policy") ?? "", /default-src 'none'/);
    assert.match(await response.text(), /RFC 8414/);
  } finally {
    t.close();
  }
});
