import assert from "node:assert/strict";
import { ignoredVariables } from "../src/app/config_check.ts";
import {
  ConfigError,
  listConfigVariables,
  listenHostname,
  loadConfig,
  missingOAuthSettings,
  oauthSettings,
  PROFILE_DEFAULTS,
} from "../src/app/config.ts";

const SECRET = "config-test-secret-value-of-at-least-32-bytes";
const CONFIGURED = { GITLAB_CLIENT_ID: "gitlab-app-id", JWT_SECRET: SECRET };

/** Asserts that `env` is refused with a one-line ConfigError naming `variable`. */
function assertRejected(env: Record<string, string>, variable: string): ConfigError {
  let caught: unknown;
  try {
    loadConfig(env);
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ConfigError, `expected a ConfigError for ${JSON.stringify(env)}`);
  assert.equal(caught.variable, variable);
  assert.ok(caught.message.includes(variable), `message names ${variable}: ${caught.message}`);
  assert.doesNotMatch(caught.message, /[\r\n]/, "message is one line");
  return caught;
}

Deno.test("loadConfig defaults", async (t) => {
  const config = loadConfig({});

  await t.step("server address", () => {
    assert.equal(config.port, 8000);
    assert.equal(listenHostname(config), "0.0.0.0");
  });
  await t.step("GitLab", () => {
    assert.equal(config.upstream.url.href, "https://gitlab.com/");
    assert.equal(config.upstream.scopes, "api");
    assert.equal(config.upstream.clientId, undefined);
  });
  await t.step("lifetimes", () => {
    assert.equal(config.accessTokenTtlSeconds, 3600);
    assert.equal(config.sessionIdleTtlSeconds, 30 * 24 * 60 * 60);
  });
  await t.step("proxy, storage and base URL", () => {
    assert.deepEqual(config.trustProxy, []);
    assert.deepEqual(config.rateLimitExempt, []);
    assert.equal(config.kvPath, undefined);
    assert.equal(config.baseUrl, undefined);
  });
  await t.step("empty and blank values count as unset", () => {
    const blank = loadConfig({ PORT: "", HOST: "  ", ACCESS_TOKEN_TTL: "", KV_PATH: "" });
    assert.equal(blank.port, 8000);
    assert.equal(listenHostname(blank), "0.0.0.0");
    assert.equal(blank.accessTokenTtlSeconds, 3600);
    assert.equal(blank.kvPath, undefined);
  });
});

Deno.test("loadConfig reads valid values", async (t) => {
  await t.step("every variable", () => {
    const config = loadConfig({
      ...CONFIGURED,
      PORT: "9090",
      HOST: "127.0.0.1",
      GITLAB_URL: "https://gitlab.example.org",
      GITLAB_SCOPES: "read_user api",
      ACCESS_TOKEN_TTL: "600",
      SESSION_IDLE_TTL: "86400",
      KV_PATH: "/tmp/kv.sqlite",
      BASE_URL: "https://auth.example.org",
      TRUST_PROXY: "true",
    });
    assert.equal(config.port, 9090);
    assert.equal(listenHostname(config), "127.0.0.1");
    assert.equal(config.upstream.url.origin, "https://gitlab.example.org");
    assert.equal(config.upstream.clientId, "gitlab-app-id");
    assert.equal(config.upstream.scopes, "read_user api");
    assert.equal(config.jwtSecret, SECRET);
    assert.equal(config.accessTokenTtlSeconds, 600);
    assert.equal(config.sessionIdleTtlSeconds, 86400);
    assert.equal(config.kvPath, "/tmp/kv.sqlite");
    assert.equal(config.baseUrl, "https://auth.example.org");
    assert.deepEqual(config.trustProxy, ["127.0.0.0/8", "::1/128"]);
  });
  await t.step("BASE_URL loses its trailing slash", () => {
    assert.equal(
      loadConfig({ BASE_URL: "https://auth.example.org/" }).baseUrl,
      "https://auth.example.org",
    );
    assert.equal(
      loadConfig({ BASE_URL: "https://auth.example.org/prefix/" }).baseUrl,
      "https://auth.example.org/prefix",
    );
  });
  await t.step("TRUST_PROXY: true is loopback, false none, else CIDRs in one spelling", () => {
    const withBase = (value: string) =>
      loadConfig({ BASE_URL: "https://auth.example.org", TRUST_PROXY: value }).trustProxy;
    for (const yes of ["1", "true", "TRUE", "yes", "on"]) {
      assert.deepEqual(withBase(yes), ["127.0.0.0/8", "::1/128"], yes);
    }
    for (const no of ["0", "false", "False", "no", "off"]) {
      assert.deepEqual(loadConfig({ TRUST_PROXY: no }).trustProxy, [], no);
    }
    assert.deepEqual(withBase(" 10.0.0.0/8, FD00::/8 ,192.0.2.7,::FFFF:198.51.100.1"), [
      "10.0.0.0/8",
      "fd00::/8",
      "192.0.2.7/32",
      "198.51.100.1/32",
    ]);
  });
  await t.step("RATE_LIMIT_EXEMPT: none, else CIDRs in one spelling", () => {
    assert.deepEqual(loadConfig({ RATE_LIMIT_EXEMPT: "NONE" }).rateLimitExempt, []);
    const exempt =
      loadConfig({ RATE_LIMIT_EXEMPT: " 203.0.113.7, 2001:DB8:7::/48 ,::ffff:10.1.2.3" })
        .rateLimitExempt;
    assert.deepEqual(exempt, ["203.0.113.7/32", "2001:db8:7::/48", "10.1.2.3/32"]);
  });
  await t.step("a JWT_SECRET of exactly 32 bytes is accepted", () => {
    assert.equal(loadConfig({ JWT_SECRET: "x".repeat(32) }).jwtSecret, "x".repeat(32));
  });
});

Deno.test("listen address: HOST, else HOSTNAME only when it is an address", async (t) => {
  const listen = (env: Record<string, string>) => listenHostname(loadConfig(env));
  await t.step("a machine name in HOSTNAME (as shells and containers set it) is ignored", () => {
    for (const name of ["web-7f9c4d", "build.example.org", "localhost.localdomain", "1.2.3"]) {
      assert.equal(listen({ HOSTNAME: name }), "0.0.0.0", name);
    }
  });
  await t.step("an IP literal or localhost in HOSTNAME is honoured", () => {
    assert.equal(listen({ HOSTNAME: "127.0.0.1" }), "127.0.0.1");
    assert.equal(listen({ HOSTNAME: "::1" }), "::1");
    assert.equal(listen({ HOSTNAME: "[::1]" }), "::1");
    assert.equal(listen({ HOSTNAME: "localhost" }), "localhost");
    assert.equal(listen({ HOSTNAME: "256.1.1.1" }), "0.0.0.0");
  });
  await t.step("HOST wins over HOSTNAME", () => {
    assert.equal(listen({ HOST: "127.0.0.1", HOSTNAME: "10.0.0.5" }), "127.0.0.1");
    assert.equal(listen({ HOST: "[::]", HOSTNAME: "10.0.0.5" }), "::");
  });
});

Deno.test("loadConfig rejects bad values with a one-line ConfigError", async (t) => {
  await t.step("JWT_SECRET under 32 bytes", () => {
    assertRejected({ JWT_SECRET: "x".repeat(31) }, "JWT_SECRET");
    assertRejected({ GITLAB_CLIENT_ID: "id", JWT_SECRET: "short" }, "JWT_SECRET");
  });
  await t.step("JWT_SECRET counts bytes, not characters", () => {
    // 16 characters, 32 bytes: accepted; 15 of them (30 bytes) are not.
    assert.equal(loadConfig({ JWT_SECRET: "é".repeat(16) }).jwtSecret, "é".repeat(16));
    assertRejected({ JWT_SECRET: "é".repeat(15) }, "JWT_SECRET");
  });
  await t.step("ACCESS_TOKEN_TTL not a positive whole number", () => {
    for (const bad of ["abc", "-5", "1.5", "0", "1e3", "0x10"]) {
      assertRejected({ ACCESS_TOKEN_TTL: bad }, "ACCESS_TOKEN_TTL");
    }
  });
  await t.step("SESSION_IDLE_TTL not a whole number", () => {
    assertRejected({ SESSION_IDLE_TTL: "forever" }, "SESSION_IDLE_TTL");
  });
  await t.step("PORT out of range or not a number", () => {
    assertRejected({ PORT: "70000" }, "PORT");
    assertRejected({ PORT: "http" }, "PORT");
  });
  await t.step("GITLAB_URL not an http(s) URL", () => {
    assertRejected({ GITLAB_URL: "not a url" }, "GITLAB_URL");
    assertRejected({ GITLAB_URL: "ftp://x" }, "GITLAB_URL");
  });
  await t.step("a URL with a user name or password, never echoed", () => {
    for (const name of ["GITLAB_URL", "BASE_URL", "MCP_UPSTREAM_URL"]) {
      for (
        const url of [
          "https://deploy-bot:glpat-SECRET@gitlab.example.com",
          "https://bot@x.example",
          // A password holding `/`, `#`, `?` or a space: the URL may not parse at all.
          "https://deploy-bot:glpat/SECRET@gitlab.example.com",
          "https://bot:x#SECRET@x.example",
          "https://bot:x?SECRET@x.example",
          "https://bot:x SECRET@x.example",
        ]
      ) {
        assert.throws(
          () => loadConfig({ [name]: url }),
          (error: Error) =>
            error instanceof ConfigError && error.message.includes(name) &&
            !error.message.includes("SECRET") && !error.message.includes("bot"),
          `${name}=${url}`,
        );
      }
    }
  });
  await t.step("BASE_URL malformed", () => {
    assertRejected({ BASE_URL: "auth.example.org" }, "BASE_URL");
    assertRejected({ BASE_URL: "http://" }, "BASE_URL");
    assertRejected({ BASE_URL: "javascript:alert(1)" }, "BASE_URL");
    assertRejected({ BASE_URL: "https://auth.example.org/?x=1" }, "BASE_URL");
  });
  await t.step("a bare ? or # counts as a query or fragment (the URL keeps it)", () => {
    // Else the issuer is `https://auth.example.org/#` and the token endpoint `…/#/token`.
    for (const name of ["BASE_URL", "GITLAB_URL", "MCP_RESOURCE_URL", "GITLAB_ISSUER"]) {
      for (
        const url of [
          "https://auth.example.org/#",
          "https://auth.example.org/a?",
          "https://auth.example.org?#",
        ]
      ) {
        assertRejected({ [name]: url }, name);
      }
    }
    assertRejected(
      { MCP_UPSTREAM_URL: "https://mcp.example.org/mcp?tenant=7#" },
      "MCP_UPSTREAM_URL",
    );
    assert.equal(
      loadConfig({ MCP_UPSTREAM_URL: "https://mcp.example.org/mcp?" }).mcpUpstreamUrl?.href,
      "https://mcp.example.org/mcp?",
    );
  });
  await t.step("RATE_LIMIT_*: requests/seconds within bounds, or off", () => {
    assert.deepEqual(loadConfig({ RATE_LIMIT_TOKEN: " 10/60 " }).rateLimits.token, {
      limit: 10,
      windowSeconds: 60,
    });
    assert.equal(loadConfig({ RATE_LIMIT_TOKEN: "OFF" }).rateLimits.token, undefined);
    assert.deepEqual(loadConfig({ RATE_LIMIT_MCP: "1000000000/31536000" }).rateLimits.mcp, {
      limit: 1_000_000_000,
      windowSeconds: 31_536_000,
    });
    const bad = ["0/60", "10/0", "10/60s", "10 / 60", "-1/60", "1e3/60", "10/", "none", "10"];
    // Past a year the window's records would expire past what the store accepts (then 500).
    const huge = ["1/99999999999999999999", `1/${"9".repeat(400)}`, "1/31536001", "1000000001/60"];
    for (const value of [...bad, ...huge]) {
      assertRejected({ RATE_LIMIT_TOKEN: value }, "RATE_LIMIT_TOKEN");
    }
  });
  await t.step("TRUST_PROXY neither a boolean nor CIDRs", () => {
    const base = { BASE_URL: "https://auth.example.org" };
    for (const bad of ["maybe", "10.0.0.0/33", "10.0.0/8", "fd00::/129", "10.0.0.0/8,", "::1%lo"]) {
      assertRejected({ ...base, TRUST_PROXY: bad }, "TRUST_PROXY");
    }
  });
  await t.step("RATE_LIMIT_EXEMPT not CIDRs (true/false are TRUST_PROXY's, not its)", () => {
    for (const bad of ["true", "off", "10.0.0.0/33", "1.2.3", "10.0.0.0/8,", "0x01020304/8"]) {
      assertRejected({ RATE_LIMIT_EXEMPT: bad }, "RATE_LIMIT_EXEMPT");
    }
  });
  await t.step("TRUST_PROXY without BASE_URL refuses to start, naming BASE_URL", () => {
    for (const value of ["true", "10.0.0.0/8"]) {
      const error = assertRejected({ TRUST_PROXY: value }, "TRUST_PROXY");
      assert.match(error.message, /BASE_URL/);
    }
  });
  await t.step("MCP_UPSTREAM_FORWARD_HEADERS: header names, never a credential", () => {
    assert.equal(loadConfig({}).mcpUpstreamForwardHeaders, undefined);
    assert.deepEqual(
      loadConfig({ MCP_UPSTREAM_FORWARD_HEADERS: " X-Tenant ,x-request-id" })
        .mcpUpstreamForwardHeaders,
      ["x-tenant", "x-request-id"],
    );
    for (
      const bad of [
        "Authorization",
        "x-tenant,PRIVATE-TOKEN",
        "Job-Token",
        "cookie",
        "Sudo",
        "Proxy-Authorization",
        "Host",
        "bad header",
      ]
    ) {
      assertRejected({ MCP_UPSTREAM_FORWARD_HEADERS: bad }, "MCP_UPSTREAM_FORWARD_HEADERS");
    }
  });
  await t.step("a value with a line break still gives a one-line message", () => {
    assertRejected({ PORT: "80\n80" }, "PORT");
    assertRejected({ GITLAB_URL: "not\na url" }, "GITLAB_URL");
    assertRejected({ TRUST_PROXY: "may\r\nbe" }, "TRUST_PROXY");
    // A file's path is named as written: its line break too, escaped.
    for (const name of ["MCP_SERVERS_FILE", "MACHINE_ACCESS_FILE", "METRICS_TOKEN_FILE"]) {
      const error = assertRejected({ [name]: "/tmp/no\nsuch\u0000file" }, name);
      assert.ok(error.message.includes("/tmp/no\\nsuch\\u0000file"), error.message);
    }
  });
  await t.step("the secret never appears in any ConfigError message", () => {
    const short = "short-secret-42";
    const shortError = assertRejected({ JWT_SECRET: short }, "JWT_SECRET");
    assert.ok(!shortError.message.includes(short), shortError.message);
    assert.ok(!String(shortError.stack).includes(short));

    const others = [
      { ACCESS_TOKEN_TTL: "abc" },
      { PORT: "70000" },
      { GITLAB_URL: "ftp://x" },
      { BASE_URL: "not a url" },
      { TRUST_PROXY: "maybe" },
    ];
    for (const bad of others) {
      let message = "";
      try {
        loadConfig({ ...CONFIGURED, ...bad });
      } catch (error) {
        assert.ok(error instanceof ConfigError);
        message = error.message;
      }
      assert.ok(message, `expected ${JSON.stringify(bad)} to be rejected`);
      assert.ok(!message.includes(SECRET), message);
    }
  });
});

Deno.test("OAuth settings", async (t) => {
  await t.step("missing GITLAB_CLIENT_ID and JWT_SECRET do not throw", () => {
    const config = loadConfig({});
    assert.equal(oauthSettings(config), undefined);
    assert.deepEqual(missingOAuthSettings(config), ["GITLAB_CLIENT_ID", "JWT_SECRET"]);
  });
  await t.step("only GITLAB_CLIENT_ID missing", () => {
    const config = loadConfig({ JWT_SECRET: SECRET });
    assert.equal(oauthSettings(config), undefined);
    assert.deepEqual(missingOAuthSettings(config), ["GITLAB_CLIENT_ID"]);
  });
  await t.step("only JWT_SECRET missing (or blank)", () => {
    for (const JWT_SECRET of [undefined, "", "   "]) {
      const config = loadConfig({ GITLAB_CLIENT_ID: "gitlab-app-id", JWT_SECRET });
      assert.equal(oauthSettings(config), undefined);
      assert.deepEqual(missingOAuthSettings(config), ["JWT_SECRET"]);
    }
  });
  await t.step("both present", () => {
    const config = loadConfig(CONFIGURED);
    assert.deepEqual(oauthSettings(config), { gitlabClientId: "gitlab-app-id", jwtSecret: SECRET });
    assert.deepEqual(missingOAuthSettings(config), []);
  });
});

Deno.test("docs/configuration.md's table matches CONFIG_VARIABLES", async (t) => {
  const readme = await Deno.readTextFile(new URL("../docs/configuration.md", import.meta.url));
  const variables = listConfigVariables();

  await t.step("each variable appears once in CONFIG_VARIABLES", () => {
    const names = variables.map((variable) => variable.name);
    assert.deepEqual(names, [...new Set(names)]);
  });
  await t.step("a shown default starts with the actual default", () => {
    for (const { name, defaultValue, shownDefault } of variables) {
      if (defaultValue === undefined) continue;
      assert.ok(shownDefault.startsWith(`\`${defaultValue}\``), `${name}: ${shownDefault}`);
    }
  });
  await t.step("a default the strict profile changes says so", () => {
    for (const [name, value] of Object.entries(PROFILE_DEFAULTS.strict)) {
      const variable = variables.find((entry) => entry.name === name);
      assert.ok(variable, name);
      assert.ok(
        variable.shownDefault.includes(`(strict: \`${value}\`)`),
        `${name}: ${variable.shownDefault}`,
      );
    }
  });
  await t.step("same variables, same defaults", () => {
    const inCode = variables.map(({ name, shownDefault }) => `${name}: ${shownDefault}`);
    const inReadme = configurationRows(readme).map(([name, shownDefault]) =>
      `${variableName(name)}: ${shownDefault}`
    );
    assert.deepEqual(inReadme.toSorted(), inCode.toSorted());
  });
  await t.step("these meanings read as the table's (others still differ in wording)", () => {
    const rows = new Map(configurationRows(readme).map(([name, , meaning]) => [name, meaning]));
    for (
      const name of ["DATABASE_TIMEOUT_MS", "RATE_LIMIT_DEVICE", "RATE_LIMIT_MCP", "GITLAB_ISSUER"]
    ) {
      const variable = variables.find((entry) => entry.name === name);
      assert.equal(variable?.meaning, rows.get(`\`${name}\``), name);
    }
  });
});

/** The body rows of the markdown table in docs/configuration.md's "## Configuration", as cells. */
function configurationRows(readme: string): string[][] {
  const section = readme.split(/^## /m).find((part) => part.startsWith("Configuration\n"));
  assert.ok(section, 'docs/configuration.md has a "## Configuration" section');
  const rows = section.split("\n").filter((line) => line.startsWith("|")).map(tableCells);
  assert.deepEqual(rows[0], ["variable", "default", "meaning"], "the table's header");
  return rows.slice(2);
}

/** The trimmed cells of one markdown table row; `\|` inside a cell is not a separator. */
function tableCells(row: string): string[] {
  return row.replace(/^\|/, "").replace(/\|\s*$/, "").split(/(?<!\\)\|/).map((cell) => cell.trim());
}

/** `NAME` in backticks, as the table's variable column writes it. */
function variableName(cell: string): string {
  const match = cell.match(/^`([A-Z0-9_]+)`$/);
  assert.ok(match, `a variable cell is one \`NAME\`: ${cell}`);
  return match[1];
}

Deno.test("ignored variables: a near name of one, or a _FILE of a non-secret, warns; others do not", () => {
  assert.deepEqual(
    ignoredVariables({
      JWT_SECERT: "x",
      revoke_on_refresh_replay: "true",
      RATE_LIMIT_TOKENS: "1/60",
      GITLAB_CLIENT_ID_FILE: "/run/secrets/id",
      JWT_SECRET_FILE: "/run/secrets/jwt",
      ALLOWED_GITLAB_USER: " ",
    }),
    [
      "JWT_SECERT is ignored: did you mean JWT_SECRET?",
      "revoke_on_refresh_replay is ignored: did you mean REVOKE_ON_REFRESH_REPLAY?",
      "RATE_LIMIT_TOKENS is ignored: did you mean RATE_LIMIT_TOKEN?",
      "GITLAB_CLIENT_ID_FILE is ignored: only secrets may come from a file; set GITLAB_CLIENT_ID itself",
    ],
  );
  // What shells, containers, Kubernetes, CI and Deno set: none is near enough to warn about.
  const common = [
    "PATH",
    "HOME",
    "HOSTNAME",
    "HOSTTYPE",
    "PWD",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "TZ",
    "DENO_DIR",
    "DENO_CERT",
    "DENO_KV_ACCESS_TOKEN",
    "DENO_DEPLOYMENT_ID",
    "NO_COLOR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "no_proxy",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_PORT",
    "GITLAB_MCP_AUTH_PORT",
    "CI",
    "CI_JOB_TOKEN",
    "GITLAB_CI",
    "GITLAB_TOKEN",
    "GITLAB_HOST",
    "CREDENTIALS_DIRECTORY",
    "PGPASSWORD",
    "PGHOST",
    "POSTGRES_PASSWORD",
    "LOG_LEVEL",
  ];
  assert.deepEqual(ignoredVariables(Object.fromEntries(common.map((name) => [name, "x"]))), []);
});
