/**
 * Issue 22 §1.10: a proxy on the same host without TRUST_PROXY makes every client loopback,
 * exempt from the rate limits. The first loopback request with `X-Forwarded-For` or `Forwarded`
 * logs one warning naming TRUST_PROXY; never again in that process, never with TRUST_PROXY set.
 */

import assert from "node:assert/strict";
import { TEST_SECRET } from "./_helpers.ts";
import { spawnService } from "./_service.ts";

const BASE = {
  KV_PATH: ":memory:",
  GITLAB_URL: "http://127.0.0.1:9",
  GITLAB_CLIENT_ID: "gitlab-app-id",
  JWT_SECRET: TEST_SECRET,
};

async function get(url: string, headers: Record<string, string> = {}): Promise<void> {
  const response = await fetch(`${url}/healthz`, { headers });
  await response.body?.cancel();
}

/** The request lines are written after the answer: wait until `count` of them are in. */
async function waitForRequestLines(logs: string[], count: number): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (logs.filter((line) => line.includes('"message":"request"')).length >= count) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function warnings(logs: string[]): string[] {
  return logs.filter((line) => line.includes("TRUST_PROXY is unset"));
}

Deno.test("a loopback peer forwarding without TRUST_PROXY: one warning per process, with the fix", async () => {
  const service = await spawnService(BASE);
  try {
    await get(service.url);
    await waitForRequestLines(service.logs, 1);
    assert.equal(warnings(service.logs).length, 0, "no forwarded header, no warning");
    for (let i = 0; i < 3; i++) await get(service.url, { "X-Forwarded-For": "203.0.113.7" });
    await get(service.url, { Forwarded: "for=203.0.113.8" });
    await waitForRequestLines(service.logs, 5);
    const found = warnings(service.logs);
    assert.equal(found.length, 1, service.logs.join("\n"));
    assert.match(found[0], /"level":"warn"/);
    assert.match(found[0], /set TRUST_PROXY/);
  } finally {
    await service.stop();
  }
});

Deno.test("with TRUST_PROXY set, forwarded headers from loopback warn nothing", async () => {
  const service = await spawnService({
    ...BASE,
    TRUST_PROXY: "127.0.0.1/32",
    BASE_URL: "https://auth.example",
  });
  try {
    for (let i = 0; i < 2; i++) await get(service.url, { "X-Forwarded-For": "203.0.113.7" });
    await waitForRequestLines(service.logs, 2);
    assert.equal(warnings(service.logs).length, 0, service.logs.join("\n"));
  } finally {
    await service.stop();
  }
});

Deno.test("a proxy put in front later, after many direct requests, is still noticed (the check samples)", async () => {
  const service = await spawnService(BASE);
  try {
    for (let i = 0; i < 300; i++) await get(service.url);
    for (let i = 0; i < 20; i++) await get(service.url, { "X-Forwarded-For": "203.0.113.7" });
    await waitForRequestLines(service.logs, 320);
    assert.equal(warnings(service.logs).length, 1, "one warning once the proxy forwards");
  } finally {
    await service.stop();
  }
});
