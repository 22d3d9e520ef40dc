/**
 * Poll economy across real processes: two services (`main.ts`) on one KV file and the simulated
 * GitLab. A double `/authorize` spread over both starts one device flow, and GitLab's 429 with
 * `Retry-After: 30` stops every GitLab poll from either process (for every flow) while the pages
 * keep hearing `pending`. The processes run on the wall clock, so this shows the pause holding
 * for the test's few seconds and recorded for 30 s in the shared KV; poll_economy_test.ts moves
 * an injected clock across the whole 30 s.
 */

import assert from "node:assert/strict";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { recordsOf } from "../src/store/keys.ts";
import { TEST_BASE, TEST_SECRET } from "./_helpers.ts";
import { authorizeOverHttp, pollOverHttp, type ServiceProcess, spawnService } from "./_service.ts";

Deno.test("poll economy, two processes: one device flow for a double /authorize; after GitLab's 429 with Retry-After: 30 no process polls GitLab", async () => {
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir({ prefix: "poll-economy-mp-" });
  const kvPath = `${dir}/kv.sqlite`;
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "economy-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: kvPath,
    // Instances behind one name: the same request is the same on either.
    BASE_URL: TEST_BASE,
  };
  const services: ServiceProcess[] = [];
  let limitedAt = 0;
  let codes: number[] = [];
  try {
    try {
      services.push(await spawnService(env));
      services.push(await spawnService(env));
      const [a, b] = services.map((service) => service.url);

      // The same authorization URL opened twice at once, each time on another process.
      const [pageA, pageB] = await Promise.all([
        authorizeOverHttp(a, { state: "first" }),
        authorizeOverHttp(b, { state: "first" }),
      ]);
      assert.equal(pageA.flowState, pageB.flowState, "both pages show the same flow");
      assert.equal(gitlab.calls.authorizeDevice, 1, "one device flow at GitLab");
      const firstUserCode = gitlab.lastUserCode()!;
      const second = await authorizeOverHttp(b, { state: "second" });
      assert.equal(gitlab.calls.authorizeDevice, 2);

      gitlab.rateLimit(30);
      limitedAt = Date.now();
      assert.deepEqual(await pollOverHttp(a, pageA.flowState), {
        status: 200,
        body: { status: "pending" },
      });
      assert.equal(gitlab.calls.deviceToken, 1, "GitLab answered 429");

      gitlab.approve(firstUserCode);
      for (let round = 0; round < 3; round++) {
        for (const url of [a, b]) {
          for (const flowState of [pageA.flowState, second.flowState]) {
            assert.deepEqual(await pollOverHttp(url, flowState), {
              status: 200,
              body: { status: "pending" },
            });
          }
        }
      }
      assert.equal(gitlab.calls.deviceToken, 1, "no process polled GitLab during the pause");
    } finally {
      codes = await Promise.all(services.map((service) => service.stop()));
      await gitlab.close();
    }
    assert.deepEqual(codes, codes.map(() => 0));
    for (const service of services) {
      assert.deepEqual(
        service.logs.filter((line) => /unhandled error|"status":500/.test(line)),
        [],
      );
    }
    const paused = services.flatMap((service) =>
      service.logs.filter((line) => line.includes("upstream rate limit: polling paused"))
    );
    assert.equal(paused.length, 1, "the one 429 paused the service, once");
    const kv = await Deno.openKv(kvPath);
    try {
      const pauses = await recordsOf<{ expiresAt: number }>(kv, "pause");
      assert.equal(pauses.length, 1, "one pause for the whole service");
      const pausedFor = pauses[0].value.expiresAt - limitedAt;
      assert.ok(pausedFor > 29_000 && pausedFor <= 31_000, `paused for ${pausedFor} ms`);
    } finally {
      kv.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
