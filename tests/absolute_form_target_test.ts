/**
 * Issue 22 §1.6: an absolute-form request target (`GET ftp://evil/x HTTP/1.1`) must be http(s)
 * with a host under the Host header's rules; anything else is a 400 invalid_request JSON, never
 * a 500, never an issuer taken from it. Over a raw TCP connection to the running service.
 */

import assert from "node:assert/strict";
import { TEST_SECRET } from "./_helpers.ts";
import { rawRequest, spawnService } from "./_service.ts";

Deno.test("absolute-form targets: only http(s) on a valid host; else 400 JSON, no error line", async () => {
  const service = await spawnService({
    KV_PATH: ":memory:",
    GITLAB_URL: "http://127.0.0.1:9",
    GITLAB_CLIENT_ID: "gitlab-app-id",
    JWT_SECRET: TEST_SECRET,
  });
  try {
    const port = new URL(service.url).port;
    const host = `Host: 127.0.0.1:${port}`;
    // A well-formed request first: the service remembers the last good URL, and must still
    // look at every other one.
    const first = await rawRequest(service.url, ["GET /healthz HTTP/1.1", host]);
    assert.equal(first.status, 200, first.body);
    for (
      const target of [
        "file://evil/healthz",
        "ftp://evil/.well-known/oauth-authorization-server",
        "ws://evil/.well-known/oauth-authorization-server",
        "http://a:99999/healthz",
        "http://[::1/healthz",
      ]
    ) {
      const answer = await rawRequest(service.url, [`GET ${target} HTTP/1.1`, host]);
      assert.equal(answer.status, 400, `${target}: ${answer.status} ${answer.body}`);
      assert.equal(JSON.parse(answer.body).error, "invalid_request", target);
    }
    const http = await rawRequest(service.url, [
      `GET http://127.0.0.1:${port}/.well-known/oauth-authorization-server HTTP/1.1`,
      host,
    ]);
    assert.equal(http.status, 200, http.body);
    assert.equal(JSON.parse(http.body).issuer, `http://127.0.0.1:${port}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok(
      !service.logs.some((line) => /"level":"error"/.test(line)),
      service.logs.join("\n"),
    );
  } finally {
    await service.stop();
  }
});
