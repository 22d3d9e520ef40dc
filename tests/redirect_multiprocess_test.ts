/**
 * The redirect sign-in across service processes (`main.ts`) sharing one KV file and one
 * simulated GitLab, as behind a load balancer: the consent page from one, its form posted to
 * another, GitLab's callback raced over both. Every step is a KV record, so any process serves
 * any step, and a raced callback completes exactly once. The GitLab application is confidential
 * here: the exchange succeeds only with GITLAB_CLIENT_SECRET, which no log line shows.
 */

import assert from "node:assert/strict";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { authorizeQuery, consentFormOf, CookieJar, TEST_SECRET } from "./_helpers.ts";
import { decideAtGitLab, exchangeOverHttp, type ServiceProcess, spawnService } from "./_service.ts";

/** The public base URL both processes share; requests are sent to the processes themselves. */
const BASE = "http://auth.test";
const REDIRECT_URI = "http://127.0.0.1:9/callback";
const PARALLEL = 10;
/** A confidential GitLab application: GitLab refuses the code exchange without its secret. */
const CLIENT_SECRET = "confidential-gitlab-application-secret";

/** `url` (under BASE) as sent to the process at `processUrl`. */
function at(processUrl: string, url: string | URL): string {
  const target = new URL(url);
  assert.equal(target.origin, BASE);
  return `${processUrl}${target.pathname}${target.search}`;
}

Deno.test("redirect sign-in over two processes on one KV file, confidential GitLab application: consent on one, form on the other, a raced callback completes once", async () => {
  const gitlab = startSimulatedGitLab({ clientSecret: CLIENT_SECRET });
  const dir = await Deno.makeTempDir({ prefix: "redirect-multiprocess-" });
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "multi-app",
    JWT_SECRET: TEST_SECRET,
    KV_PATH: `${dir}/kv.sqlite`,
    BASE_URL: BASE,
    GITLAB_SIGN_IN: "redirect",
    GITLAB_CLIENT_SECRET: CLIENT_SECRET,
  };
  const services: ServiceProcess[] = [];
  try {
    // The first one creates the database; the second opens it.
    services.push(await spawnService(env));
    services.push(await spawnService(env));
    const [a, b] = services.map((service) => service.url);
    const jar = new CookieJar();
    const query = authorizeQuery({ client_id: "multi-client", redirect_uri: REDIRECT_URI });

    const page = await fetch(`${a}/authorize?${query}`);
    jar.store(page);
    const form = consentFormOf(await page.text());
    const posted = await fetch(`${b}/oauth/consent`, {
      method: "POST",
      headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ ...form, action: "continue" }),
      redirect: "manual",
    });
    jar.store(posted);
    assert.equal(posted.status, 302);
    const back = await decideAtGitLab(new URL(posted.headers.get("location") ?? ""), "approve");

    const answers = await Promise.all(
      Array.from({ length: PARALLEL }, async (_, i) => {
        const response = await fetch(at(i % 2 === 0 ? a : b, back), {
          headers: jar.headers(),
          redirect: "manual",
        });
        await response.body?.cancel();
        return { status: response.status, location: response.headers.get("location") };
      }),
    );
    const winners = answers.filter((answer) => answer.status === 302);
    assert.equal(winners.length, 1, JSON.stringify(answers));
    assert.ok(answers.every((answer) => answer.status === 302 || answer.status === 400));
    assert.equal(gitlab.calls.authorizationCode, 1, "GitLab's code is exchanged once");

    const landed = new URL(winners[0].location ?? "");
    assert.equal(landed.searchParams.get("iss"), BASE);
    const tokens = await exchangeOverHttp(b, landed.searchParams.get("code") ?? "", REDIRECT_URI);
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));

    // The consent the second process remembered is honoured by the first: straight to GitLab.
    const again = await fetch(`${a}/authorize?${query}`, {
      headers: jar.headers(),
      redirect: "manual",
    });
    await again.body?.cancel();
    assert.equal(again.status, 302);
    assert.ok(again.headers.get("location")?.startsWith(gitlab.url.origin));
  } finally {
    for (const service of services) {
      const logs = service.logs.join("\n");
      assert.equal(await service.stop(), 0, logs);
      assert.doesNotMatch(logs, /"level":"error"/, logs);
      assert.ok(!logs.includes(CLIENT_SECRET), "the GitLab application's secret is never logged");
    }
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});
