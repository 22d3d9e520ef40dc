/**
 * GitLab CI jobs' JWT bearer grant (issue 37 §1), over the real app: ID tokens signed in the test
 * by a key the fake GitLab publishes (RS256, GitLab's claim names). A token for the rule's
 * server, living no longer than the ID token, no refresh token, that calls a tool through /mcp;
 * every check fails closed with 400 `invalid_grant` naming it; a replayed `jti` (and of
 * concurrent replays exactly one wins, on both stores); a rotated key within a minute and no
 * sooner; no rule, no server, no file.
 */

import assert from "node:assert/strict";
import { startScripted } from "./_gateway_mcp.ts";
import { makeTestApp, makeTestAppOn, TEST_BASE, TEST_SECRET, type TestApp } from "./_helpers.ts";
import { rawRequest, spawnService, waitFor } from "./_service.ts";
import { STORE_KINDS } from "./_stores.ts";
import { recordingLogger } from "./_access.ts";
import { createLogger } from "../src/logger.ts";
import { followConfigFiles } from "../src/app/file_reloads.ts";

const GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";

const ACCESS = `ci:
  - project: acme/*
    ref: main
    ref_protected: true
    servers: [default]
    tools: [get_*]
  - project: acme/docs
    servers: [docs]
`;

async function accessEnv(upstreamUrl = "http://127.0.0.1:1/mcp"): Promise<Record<string, string>> {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/access.yaml`, ACCESS);
  await Deno.writeTextFile(
    `${dir}/servers.yaml`,
    `servers:\n  - name: docs\n    url: http://127.0.0.1:1/mcp\n`,
  );
  return {
    MACHINE_ACCESS_FILE: `${dir}/access.yaml`,
    MCP_SERVERS_FILE: `${dir}/servers.yaml`,
    MCP_UPSTREAM_URL: upstreamUrl,
  };
}

function grant(t: Pick<TestApp, "app">, params: Record<string, string>): Promise<Response> {
  return Promise.resolve(t.app(
    new Request(`${TEST_BASE}/token`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: GRANT, ...params }),
    }),
  ));
}

/** An ID token for our issuer, signed by the fake GitLab, with `claims` over GitLab's. */
function idToken(
  t: Pick<TestApp, "upstream" | "clock">,
  claims: Record<string, unknown> = {},
  header = {},
) {
  return t.upstream.idTokens.sign(TEST_BASE, t.clock.now(), claims, header);
}

async function refusal(response: Response) {
  const body = await response.json();
  return { status: response.status, error: body.error, description: body.error_description };
}

async function withGrantApp(fn: (t: TestApp) => Promise<void>, upstreamUrl?: string) {
  const t = await makeTestApp({ env: await accessEnv(upstreamUrl) });
  try {
    await fn(t);
  } finally {
    t.close();
  }
}

Deno.test("jwt bearer: a CI job's ID token gets an access token that calls its rule's tool through /mcp", async () => {
  const upstream = startScripted(async (request) => {
    const message = await request.json();
    return Response.json({
      jsonrpc: "2.0",
      id: message.id,
      result: { content: [{ type: "text", text: `called ${message.params.name}` }] },
    });
  });
  try {
    await withGrantApp(async (t) => {
      const response = await grant(t, { assertion: await idToken(t), client_id: "ignored" });
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("cache-control"), "no-store");
      const body = await response.json();
      assert.equal(body.token_type, "Bearer");
      assert.equal(body.refresh_token, undefined);
      assert.ok(body.expires_in > 0 && body.expires_in <= t.config.accessTokenTtlSeconds);
      const [, payload] = body.access_token.split(".");
      const claims = JSON.parse(
        new TextDecoder().decode(Uint8Array.fromBase64(payload, { alphabet: "base64url" })),
      );
      assert.equal(claims.sub, "ci:acme/app");
      assert.equal(claims.resource, `${TEST_BASE}/mcp`);
      assert.equal(claims.ci_project, "acme/app");
      assert.equal(claims.ci_ref, "main");
      assert.equal(claims.ci_pipeline, "1234");
      assert.equal(claims.ci_job, "5678");
      assert.equal(claims.gitlab_user, "ada");
      const call = (name: string) =>
        t.app(
          new Request(`${TEST_BASE}/mcp`, {
            method: "POST",
            headers: {
              Authorization: `Bearer ${body.access_token}`,
              "Content-Type": "application/json",
              Accept: "application/json, text/event-stream",
            },
            body: JSON.stringify({
              jsonrpc: "2.0",
              id: 1,
              method: "tools/call",
              params: { name, arguments: {} },
            }),
          }),
        );
      const allowed = await (await call("get_issue")).json();
      assert.equal(allowed.result.content[0].text, "called get_issue");
      const refused = await (await call("delete_project")).json();
      assert.equal(refused.error.code, -32403);
      assert.equal(upstream.requests.length, 1);
    }, upstream.url);
  } finally {
    await upstream.close();
  }
});

Deno.test("jwt bearer: the access token lives no longer than the ID token", async () => {
  await withGrantApp(async (t) => {
    const exp = Math.floor(t.clock.now() / 1000) + 100;
    const body = await (await grant(t, { assertion: await idToken(t, { exp }) })).json();
    assert.ok(body.expires_in <= 100 && body.expires_in >= 99, String(body.expires_in));
  });
});

Deno.test("jwt bearer: every check fails closed with invalid_grant naming it", async () => {
  await withGrantApp(async (t) => {
    const now = Math.floor(t.clock.now() / 1000);
    const good = await idToken(t);
    const [h, p, s] = good.split(".");
    const flipped = s.slice(0, -2) + (s.at(-2) === "A" ? "B" : "A") + s.at(-1);
    const b64 = (value: unknown) =>
      new TextEncoder().encode(JSON.stringify(value)).toBase64({
        alphabet: "base64url",
        omitPadding: true,
      });
    const cases: [string, string | Promise<string>][] = [
      ["signature", `${h}.${p}.${flipped}`],
      ["signature", "not-a-jwt"],
      ["alg", `${b64({ alg: "HS256", kid: "gitlab-key-1" })}.${p}.${s}`],
      ["alg", `${b64({ alg: "none" })}.${p}.`],
      ["kid", idToken(t, {}, { kid: "made-up" })],
      ["kid", `${b64({ alg: "RS256" })}.${p}.${s}`],
      ["iss", idToken(t, { iss: "https://gitlab.example" })],
      ["iss", idToken(t, { iss: "https://gitlab.com/" })],
      ["aud", t.upstream.idTokens.sign("https://other.example", t.clock.now())],
      ["exp", idToken(t, { exp: now - 61 })],
      ["iat", idToken(t, { iat: now + 61 })],
      ["nbf", idToken(t, { nbf: now + 61 })],
    ];
    for (const claim of ["exp", "iat", "jti", "sub", "project_path", "ref", "ref_type"]) {
      cases.push([claim, idToken(t, { [claim]: undefined })]);
    }
    for (const [check, assertion] of cases) {
      const answer = await refusal(await grant(t, { assertion: await assertion }));
      assert.equal(answer.status, 400, check);
      assert.equal(answer.error, "invalid_grant", check);
      assert.ok(answer.description.startsWith(`${check}:`), `${check}: ${answer.description}`);
      assert.ok(!answer.description.includes("gitlab-key-1"), answer.description);
    }
    // Within the leeway each passes; an array audience naming our token endpoint too.
    const within = await idToken(t, { exp: now - 59, iat: now + 59, nbf: now + 59 });
    assert.equal((await grant(t, { assertion: within })).status, 200);
    const endpoint = await t.upstream.idTokens.sign(["x", `${TEST_BASE}/token`], t.clock.now());
    assert.equal((await grant(t, { assertion: endpoint })).status, 200);
    const missing = await refusal(await grant(t, {}));
    assert.equal(missing.error, "invalid_request");
  });
});

Deno.test("jwt bearer: a jti is accepted once; the scope asked for is granted", async () => {
  await withGrantApp(async (t) => {
    const assertion = await idToken(t);
    // A scope this service does not grant is refused before the jti is spent.
    const unknownScope = await refusal(await grant(t, { assertion, scope: "admin" }));
    assert.equal(unknownScope.error, "invalid_scope");
    const issued = await grant(t, { assertion, scope: "mcp:tools" });
    assert.equal((await issued.json()).scope, "mcp:tools");
    const replay = await refusal(await grant(t, { assertion }));
    assert.deepEqual([replay.error, replay.description.split(":")[0]], ["invalid_grant", "jti"]);
  });
});

Deno.test("jwt bearer: a request refused for its resource leaves the ID token unspent; of 20 good ones at once exactly one succeeds", async () => {
  await withGrantApp(async (t) => {
    const assertion = await idToken(t);
    for (const resource of [`${TEST_BASE}/mcp/docs`, "https://elsewhere.test/mcp", "not a url"]) {
      const refused = await refusal(await grant(t, { assertion, resource }));
      assert.equal(refused.error, "invalid_target", refused.description);
    }
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => grant(t, { assertion, resource: `${TEST_BASE}/mcp` })),
    );
    const statuses = await Promise.all(answers.map(async (answer) => {
      await answer.body?.cancel();
      return answer.status;
    }));
    assert.equal(statuses.filter((status) => status === 200).length, 1, String(statuses));
    assert.ok(statuses.every((status) => status === 200 || status === 400), String(statuses));
  });
});

for (const kind of STORE_KINDS) {
  Deno.test({
    name: `jwt bearer: of concurrent replays exactly one succeeds (${kind.name})`,
    ignore: kind.ignore,
    async fn() {
      const shared = await kind.create();
      const { database, close } = await shared.open();
      const t = await makeTestAppOn(database, { env: await accessEnv() });
      try {
        const assertion = await idToken(t);
        const answers = await Promise.all(
          Array.from({ length: 8 }, () => grant(t, { assertion })),
        );
        const statuses = await Promise.all(answers.map(async (answer) => {
          await answer.body?.cancel();
          return answer.status;
        }));
        assert.deepEqual(statuses.filter((status) => status === 200).length, 1, String(statuses));
        assert.ok(statuses.every((status) => status === 200 || status === 400), String(statuses));
      } finally {
        t.close();
        await close();
        await shared.dispose();
      }
    },
  });
}

Deno.test("jwt bearer: a rotated key works once a minute has passed since the last fetch", async () => {
  await withGrantApp(async (t) => {
    assert.equal((await grant(t, { assertion: await idToken(t) })).status, 200);
    assert.equal(t.upstream.idTokens.fetches, 1);
    t.upstream.idTokens.rotate();
    const rotated = await idToken(t);
    const early = await refusal(await grant(t, { assertion: rotated }));
    assert.ok(early.description.startsWith("kid:"), early.description);
    assert.equal(t.upstream.idTokens.fetches, 1);
    t.clock.advance(60_000);
    assert.equal((await grant(t, { assertion: rotated })).status, 200);
    assert.equal(t.upstream.idTokens.fetches, 2);
    // A known kid never fetches.
    assert.equal((await grant(t, { assertion: await idToken(t) })).status, 200);
    assert.equal(t.upstream.idTokens.fetches, 2);
  });
});

Deno.test("jwt bearer: no rule admits → invalid_grant and a warning; resource outside the rule → invalid_target", async () => {
  const logger = recordingLogger();
  const t = await makeTestApp({ env: await accessEnv(), logger });
  try {
    const stranger = await refusal(
      await grant(t, { assertion: await idToken(t, { project_path: "acme/x", ref: "dev" }) }),
    );
    assert.deepEqual(stranger, {
      status: 400,
      error: "invalid_grant",
      description: "no rule admits acme/x at ref dev",
    });
    assert.ok(logger.warnings.some((line) => line.message.includes("no rule admits")));
    const unprotected = await refusal(
      await grant(t, { assertion: await idToken(t, { ref_protected: "false" }) }),
    );
    assert.equal(unprotected.error, "invalid_grant");

    const docs = `${TEST_BASE}/mcp/docs`;
    const elsewhere = await refusal(
      await grant(t, { assertion: await idToken(t), resource: docs }),
    );
    assert.equal(elsewhere.error, "invalid_target");
    // acme/docs's rule names only docs: no resource means /mcp, which it lacks.
    const docsJob = { project_path: "acme/docs", ref: "feature" };
    const noResource = await refusal(await grant(t, { assertion: await idToken(t, docsJob) }));
    assert.equal(noResource.error, "invalid_target");
    assert.equal(
      (await grant(t, { assertion: await idToken(t, docsJob), resource: docs })).status,
      200,
    );
  } finally {
    t.close();
  }
});

Deno.test("jwt bearer: without MACHINE_ACCESS_FILE the grant is unsupported and metadata does not list it", async () => {
  const without = await makeTestApp();
  try {
    const answer = await refusal(await grant(without, { assertion: await idToken(without) }));
    assert.equal(answer.error, "unsupported_grant_type");
    const metadata = await (await without.app(
      new Request(`${TEST_BASE}/.well-known/oauth-authorization-server`),
    )).json();
    assert.ok(!metadata.grant_types_supported.includes(GRANT));
  } finally {
    without.close();
  }
  await withGrantApp(async (t) => {
    const metadata = await (await t.app(
      new Request(`${TEST_BASE}/.well-known/oauth-authorization-server`),
    )).json();
    assert.ok(metadata.grant_types_supported.includes(GRANT));
  });
});

Deno.test("jwt bearer: a service process fetches the simulated GitLab's published key over HTTP; SIGHUP re-reads the rules, a broken file keeps them", async () => {
  const { startSimulatedGitLab } = await import("../dev/simulated_gitlab.ts");
  const gitlab = startSimulatedGitLab();
  const dir = await Deno.makeTempDir();
  const access = `${dir}/access.yaml`;
  await Deno.writeTextFile(access, "ci:\n  - project: acme/*\n    servers: [default]\n");
  const base = "http://ci.auth.test";
  const service = await spawnService({
    GITLAB_CLIENT_ID: "app",
    JWT_SECRET: TEST_SECRET,
    GITLAB_URL: gitlab.url.href,
    BASE_URL: base,
    MACHINE_ACCESS_FILE: access,
  });
  const ask = async (claims: Record<string, unknown> = {}) => {
    const assertion = await gitlab.idTokens.sign(base, Date.now(), claims);
    const response = await fetch(`${service.url}/token`, {
      method: "POST",
      body: new URLSearchParams({ grant_type: GRANT, assertion }),
    });
    return { status: response.status, body: await response.json() };
  };
  try {
    const issued = await ask();
    assert.equal(issued.status, 200, JSON.stringify(issued.body));
    assert.equal(gitlab.idTokens.fetches, 1);

    await Deno.writeTextFile(access, "ci: [");
    service.signal("SIGHUP");
    await waitFor(() =>
      service.logs.some((line) => line.includes("MACHINE_ACCESS_FILE not reloaded"))
    );
    assert.equal((await ask()).status, 200);

    await Deno.writeTextFile(access, "ci:\n  - project: acme/other\n    servers: [default]\n");
    service.signal("SIGHUP");
    await waitFor(() => service.logs.some((line) => line.includes("MACHINE_ACCESS_FILE reloaded")));
    const refused = await ask();
    assert.equal(refused.body.error_description, "no rule admits acme/app at ref main");
  } finally {
    await service.stop();
    await gitlab.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("jwt bearer: the token endpoint's line names the CI caller; metrics count the grant", async () => {
  const lines: Record<string, unknown>[] = [];
  const metricsToken = "metrics-token-that-is-at-least-32-bytes!";
  const t = await makeTestApp({
    env: { ...(await accessEnv()), METRICS_TOKEN: metricsToken },
    logger: createLogger((line) => lines.push(JSON.parse(line))),
  });
  try {
    assert.equal((await grant(t, { assertion: await idToken(t) })).status, 200);
    assert.equal((await grant(t, { assertion: await idToken(t, { aud: "x" }) })).status, 400);
    const issued = lines.find((line) => line.grant === GRANT);
    assert.equal(issued?.caller, "ci");
    assert.equal(issued?.ciProject, "acme/app");
    assert.equal(issued?.ciPipeline, "1234");
    assert.equal(issued?.ciJob, "5678");
    const metrics = await (await t.app(
      new Request(`${TEST_BASE}/metrics`, { headers: { Authorization: `Bearer ${metricsToken}` } }),
    )).text();
    const count = (outcome: string) =>
      metrics.split("\n").find((line) =>
        line.startsWith("gitlab_mcp_auth_token_grants_total{") && line.includes(`"${GRANT}"`) &&
        line.includes(`outcome="${outcome}"`)
      )?.split(" ").at(-1);
    assert.equal(count("issued"), "1");
    assert.equal(count("invalid_grant"), "1");
  } finally {
    t.close();
  }
});

Deno.test("jwt bearer: without BASE_URL a reload bringing ci: rules is refused as start-up refuses it, so the Host never picks the audience", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/access.yaml`;
  await Deno.writeTextFile(path, "clients:\n  - client_id: robot\n    servers: [default]\n");
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger((line) => lines.push(JSON.parse(line)));
  const t = await makeTestApp({ env: { BASE_URL: "", MACHINE_ACCESS_FILE: path }, logger });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
  // What SIGHUP does (main.ts).
  const files = followConfigFiles(t.deps, logger, {});
  try {
    await Deno.writeTextFile(path, "ci:\n  - project: acme/*\n    servers: [default]\n");
    files.reload();
    // A job's ID token for another service, sent here with that service's name as the Host.
    const elsewhere = await t.upstream.idTokens.sign("http://elsewhere.example", t.clock.now());
    const form = new URLSearchParams({ grant_type: GRANT, assertion: elsewhere }).toString();
    const answer = await rawRequest(`http://127.0.0.1:${server.addr.port}`, [
      "POST /token HTTP/1.1",
      "Host: elsewhere.example",
      "Content-Type: application/x-www-form-urlencoded",
      `Content-Length: ${form.length}`,
    ], form);
    assert.equal(answer.status, 400, answer.body);
    assert.equal(JSON.parse(answer.body).error, "invalid_grant");
    assert.match(
      String(lines.find((line) => String(line.message).startsWith("MACHINE_ACCESS"))?.message),
      /^MACHINE_ACCESS_FILE not reloaded, the rules in force stay: .*ci: rules need BASE_URL/,
    );
  } finally {
    files.stop();
    await server.shutdown();
    t.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("jwt bearer: a key GitLab withdrew is refused once the keys are ten minutes old; while GitLab cannot answer, its last keys serve", async () => {
  await withGrantApp(async (t) => {
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, t.app);
    const post = async (assertion: string) => {
      const response = await fetch(`http://127.0.0.1:${server.addr.port}/token`, {
        method: "POST",
        body: new URLSearchParams({ grant_type: GRANT, assertion }),
      });
      return { status: response.status, body: await response.json() };
    };
    try {
      const [first, leaked, later] = await Promise.all([idToken(t), idToken(t), idToken(t)]);
      assert.equal((await post(first)).status, 200);
      // GitLab rotates its key (its private half leaked): it no longer publishes gitlab-key-1.
      t.upstream.idTokens.rotate();
      t.clock.advance(9 * 60_000);
      assert.equal((await post(later)).status, 200, "within ten minutes the cached key serves");
      t.clock.advance(60_000);
      const refused = await post(leaked);
      assert.equal(refused.status, 400);
      assert.equal(refused.body.error, "invalid_grant");
      assert.match(refused.body.error_description, /^kid:/);
      assert.equal(t.upstream.idTokens.fetches, 2);
      // A key still published serves on while GitLab answers 503 (the keys are fetched again).
      const current = await idToken(t);
      t.clock.advance(10 * 60_000);
      t.upstream.idTokens.unavailable = true;
      assert.equal((await post(current)).status, 200);
      assert.equal(t.upstream.idTokens.fetches, 3);
    } finally {
      await server.shutdown();
    }
  });
});
