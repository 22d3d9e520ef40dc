/**
 * GitLab's key set is read like every other GitLab answer: at most the upstream body limit. A
 * hostile or broken GitLab that streams an endless body gets its answer refused, the stream
 * cancelled, and the CI grant's check fails closed instead of holding the memory (or hanging).
 * Nor is a redirect followed: the keys that sign CI tokens are GITLAB_URL's own.
 */

import assert from "node:assert/strict";
import { createGitLabKeys, GitLabKeysUnavailable } from "../src/machine/gitlab_keys.ts";
import { FakeGitLabIdTokens } from "../dev/simulated_gitlab/id_tokens.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { createApp } from "../src/app/app.ts";
import { loadConfig } from "../src/app/config.ts";
import { createLogger } from "../src/logger.ts";
import { loadTemplates } from "../src/pages/mod.ts";
import { FakeClock, TEST_BASE, TEST_SECRET } from "./_helpers.ts";

Deno.test("GitLab keys: an endless body is refused once past the limit, and cancelled", async () => {
  let cancelled = false;
  const endless = new ReadableStream<Uint8Array>({
    pull(controller) {
      controller.enqueue(new Uint8Array(64 * 1024).fill(0x20));
    },
    cancel() {
      cancelled = true;
    },
  });
  const keys = createGitLabKeys({
    gitlabUrl: new URL("https://gitlab.example"),
    clock: new FakeClock(),
    timeoutMs: 60_000,
    fetch: () => Promise.resolve(new Response(endless, { status: 200 })),
  });
  await assert.rejects(keys.keyFor("any"), GitLabKeysUnavailable);
  assert.ok(cancelled, "the rest of the body is not read");
});

/**
 * The real app with GITLAB_URL at a GitLab on loopback whose keys URL redirects to `elsewhere`
 * (or serves `published` itself): the answer to a CI job's ID token signed by `signer`.
 */
async function grantWithKeysAt(
  keys: { redirectTo: string } | { published: FakeGitLabIdTokens },
  sign: (issuer: string) => Promise<string>,
): Promise<{ status: number; body: Record<string, string> }> {
  const gitlab = Deno.serve(
    { port: 0, hostname: "127.0.0.1", onListen() {} },
    (request) =>
      "redirectTo" in keys
        ? Response.redirect(`${keys.redirectTo}/oauth/discovery/keys`, 302)
        : keys.published.serve(request.url),
  );
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(
    `${dir}/access.yaml`,
    "ci:\n  - project: acme/*\n    servers: [default]\n",
  );
  const issuer = `http://127.0.0.1:${gitlab.addr.port}`;
  const config = loadConfig({
    GITLAB_URL: issuer,
    GITLAB_CLIENT_ID: "keys-app",
    JWT_SECRET: TEST_SECRET,
    BASE_URL: TEST_BASE,
    MACHINE_ACCESS_FILE: `${dir}/access.yaml`,
    MCP_UPSTREAM_URL: "http://127.0.0.1:1/mcp",
  });
  const kv = await Deno.openKv(":memory:");
  const deps = createAppDeps(config, {
    kv,
    clock: new FakeClock(Date.now()),
    logger: createLogger(() => {}),
    templates: await loadTemplates(),
  });
  try {
    const response = await createApp(deps)(
      new Request(`${TEST_BASE}/token`, {
        method: "POST",
        body: new URLSearchParams({
          grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer",
          assertion: await sign(issuer),
        }),
      }),
    );
    return { status: response.status, body: await response.json() };
  } finally {
    kv.close();
    await gitlab.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("GitLab keys: a redirect of GITLAB_URL's keys URL is not followed: another host's keys sign nothing", async () => {
  const attacker = new FakeGitLabIdTokens();
  const elsewhere = Deno.serve(
    { port: 0, hostname: "127.0.0.1", onListen() {} },
    (request) => attacker.serve(request.url),
  );
  try {
    const signedElsewhere = (issuer: string) => {
      attacker.issuer = issuer;
      return attacker.sign(TEST_BASE, Date.now());
    };
    const redirected = await grantWithKeysAt(
      { redirectTo: `http://127.0.0.1:${elsewhere.addr.port}` },
      signedElsewhere,
    );
    assert.equal(redirected.status, 400);
    assert.equal(redirected.body.error, "invalid_grant");
    assert.match(redirected.body.error_description, /^kid: GitLab's keys could not be read/);
    assert.equal(attacker.fetches, 0, "the other host was never asked");
    // The same token is good when GITLAB_URL itself publishes the key.
    const published = await grantWithKeysAt({ published: attacker }, signedElsewhere);
    assert.equal(published.status, 200, JSON.stringify(published.body));
  } finally {
    await elsewhere.shutdown();
  }
});
