/**
 * Issue 22 §1.2: the device flow is phishable by design (RFC 8628 §5.4), so SECURITY_PROFILE=strict
 * signs in by redirect unless GITLAB_SIGN_IN is set explicitly; the start-up line says which
 * sign-in runs and why.
 */

import assert from "node:assert/strict";
import { loadConfig } from "../src/app/config.ts";
import { authorizeQuery, TEST_BASE, withEnv } from "./_helpers.ts";
import { spawnService } from "./_service.ts";

// gitlab.com (the default) under strict needs a sign-in allow-list, or this on purpose.
const STRICT = {
  SECURITY_PROFILE: "strict",
  BASE_URL: "https://auth.example",
  ALLOW_ANY_GITLAB_USER: "true",
};

Deno.test("strict profile: redirect sign-in unless GITLAB_SIGN_IN says otherwise", () => {
  assert.equal(loadConfig(STRICT).upstream.signIn, "redirect");
  assert.equal(loadConfig({ ...STRICT, GITLAB_SIGN_IN: "device" }).upstream.signIn, "device");
  assert.equal(loadConfig({}).upstream.signIn, "device", "the spec profile keeps the device flow");
});

Deno.test("strict profile: /authorize answers the consent page, never a device code", () =>
  withEnv(STRICT, async (t) => {
    const registered = await t.app(
      new Request(`${TEST_BASE}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ redirect_uris: ["http://127.0.0.1:9999/callback"] }),
      }),
    );
    const { client_id } = await registered.json();
    const page = await t.app(
      new Request(`${TEST_BASE}/authorize?${authorizeQuery({ client_id })}`),
    );
    const html = await page.text();
    assert.equal(page.status, 200, html);
    assert.equal(t.upstream.calls.start, 0, "no device flow was started at GitLab");
    assert.match(html, /oauth\/consent/);
  }));

Deno.test("strict profile: the start-up line names the sign-in and why", async () => {
  for (
    const [env, signIn, because] of [
      [STRICT, "redirect", /SECURITY_PROFILE=strict.*RFC 8628/],
      [{ ...STRICT, GITLAB_SIGN_IN: "device" }, "device", /GITLAB_SIGN_IN is set/],
    ] as const
  ) {
    const service = await spawnService({ ...env, KV_PATH: ":memory:" });
    try {
      const listening = service.logs.find((line) => line.includes('"listening"'));
      assert.ok(listening);
      const fields = JSON.parse(listening);
      assert.equal(fields.signIn, signIn);
      assert.match(fields.signInBecause, because);
    } finally {
      assert.equal(await service.stop(), 0);
    }
  }
});
