/**
 * Issue 22 §1.4: a remembered consent (redirect sign-in) is bound to the GitLab scopes the
 * consent page named and to the protected resource. After GITLAB_SCOPES widens from `read_api`
 * to `api sudo`, or the protected resource moves, the old consent cookie no longer skips the
 * consent page.
 */

import assert from "node:assert/strict";
import {
  authorizeQuery,
  consentFormOf,
  CookieJar,
  makeTestApp,
  TEST_BASE,
  type TestApp,
} from "./_helpers.ts";

async function authorize(
  t: TestApp,
  jar: CookieJar,
  overrides: Record<string, string | null> = {},
): Promise<Response> {
  const response = await t.app(
    new Request(`${TEST_BASE}/authorize?${authorizeQuery(overrides)}`, { headers: jar.headers() }),
  );
  jar.store(response);
  await response.body?.cancel();
  return response;
}

async function consentOnce(t: TestApp, jar: CookieJar): Promise<void> {
  const page = await t.app(
    new Request(`${TEST_BASE}/authorize?${authorizeQuery()}`, { headers: jar.headers() }),
  );
  jar.store(page);
  const form = consentFormOf(await page.text());
  const response = await t.app(
    new Request(`${TEST_BASE}/oauth/consent`, {
      method: "POST",
      headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ ...form, action: "continue" }),
    }),
  );
  jar.store(response);
  assert.equal(response.status, 302);
}

function redirectApp(
  scopes: string,
  clock?: TestApp["clock"],
  env: Record<string, string> = {},
): Promise<TestApp> {
  return makeTestApp({ env: { GITLAB_SIGN_IN: "redirect", GITLAB_SCOPES: scopes, ...env }, clock });
}

Deno.test("redirect mode: a consent remembered for read_api does not cover api sudo", async () => {
  const before = await redirectApp("read_api");
  const jar = new CookieJar();
  let widened: TestApp | undefined;
  let same: TestApp | undefined;
  try {
    await consentOnce(before, jar);
    assert.equal((await authorize(before, jar)).status, 302, "remembered as it was");

    same = await redirectApp("read_api", before.clock);
    assert.equal((await authorize(same, jar)).status, 302, "the cookie holds across restarts");

    widened = await redirectApp("api sudo", before.clock);
    assert.equal((await authorize(widened, jar)).status, 200, "wider scopes: the consent page");
  } finally {
    before.close();
    same?.close();
    widened?.close();
  }
});

Deno.test("redirect mode: a consent remembered for one protected resource does not cover another", async () => {
  const before = await redirectApp("read_api");
  let moved: TestApp | undefined;
  try {
    const jar = new CookieJar();
    await consentOnce(before, jar);
    assert.equal((await authorize(before, jar)).status, 302);
    moved = await redirectApp("read_api", before.clock, {
      MCP_RESOURCE_URL: "https://mcp.example.com/mcp",
    });
    assert.equal((await authorize(moved, jar)).status, 200, "another resource: the consent page");
  } finally {
    before.close();
    moved?.close();
  }
});
