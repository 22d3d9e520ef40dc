/**
 * The real GitLab client against the simulated GitLab over loopback HTTP, plus a few canned
 * responses for what the simulation never sends. Sanitizers stay on: every server is closed and
 * every body consumed.
 */

import assert from "node:assert/strict";
import { createGitLabUpstream, type GitLabUpstreamOptions } from "../src/upstream/gitlab.ts";
import { type Upstream, UpstreamError } from "../src/upstream/types.ts";
import { type SimulatedGitLab, startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { withGitLab } from "./_service.ts";

const CLIENT_ID = "test-client";
const SPEC_TERMINAL_WORDS = /expired|denied|invalid/i;

/** Every token and device code a test has seen; none may show up in an error message. */
const secrets = new Set<string>();

interface LogLine {
  message: string;
  fields?: Record<string, unknown>;
}

function clientFor(
  gitlab: SimulatedGitLab,
  overrides: Partial<GitLabUpstreamOptions> = {},
  logs: LogLine[] = [],
): Upstream {
  return createGitLabUpstream({
    gitlabUrl: gitlab.url,
    clientId: CLIENT_ID,
    scopes: "read_user",
    timeoutMs: 2000,
    logger: { warn: (message, fields) => logs.push({ message, fields }) },
    ...overrides,
  });
}

function assertNoSecrets(text: string): void {
  for (const secret of secrets) {
    assert.ok(!text.includes(secret), `a token or device code leaked into: ${text}`);
  }
}

/** Awaits a rejection with an UpstreamError of the given kind and code, and checks its message. */
async function assertUpstreamError(
  promise: Promise<unknown>,
  failure: "terminal" | "transient",
  code: string,
): Promise<UpstreamError> {
  const error = await promise.then(
    (value) => assert.fail(`expected ${failure} ${code}, got ${JSON.stringify(value)}`),
    (error: unknown) => error,
  );
  assert.ok(error instanceof UpstreamError, `not an UpstreamError: ${error}`);
  assert.equal(error.failure, failure);
  assert.equal(error.code, code);
  if (failure === "terminal") {
    // The service shows it in the poll body and classifies it by these words (spec §3.1).
    assert.equal(error.message, code);
    assert.match(error.message, SPEC_TERMINAL_WORDS);
  } else {
    assert.doesNotMatch(error.message, SPEC_TERMINAL_WORDS);
  }
  assertNoSecrets(error.message);
  assertNoSecrets(String(error.stack));
  return error;
}

/** Starts a device flow and remembers its device code as a secret. */
async function startFlow(upstream: Upstream) {
  const flow = await upstream.startDeviceAuthorization();
  secrets.add(flow.deviceCode);
  return flow;
}

Deno.test("device authorization grant against the simulated GitLab", async (t) => {
  await withGitLab(async (gitlab) => {
    const upstream = clientFor(gitlab);

    await t.step("start returns a validated device authorization", async () => {
      const flow = await startFlow(upstream);
      assert.match(flow.userCode, /^[A-Z]{4}-\d{4}$/);
      assert.equal(flow.verificationUri, new URL("/oauth/device", gitlab.url).href);
      assert.equal(
        flow.verificationUriComplete,
        `${new URL("/oauth/device", gitlab.url).href}?user_code=${flow.userCode}`,
      );
      assert.equal(flow.expiresInSeconds, 300);
      assert.equal(flow.intervalSeconds, 5);
      assert.equal(gitlab.lastUserCode(), flow.userCode);
      assert.equal(gitlab.calls.authorizeDevice, 1);
    });

    await t.step("pending until approved, then tokens, then the user", async (t) => {
      const flow = await startFlow(upstream);
      assert.deepEqual(await upstream.pollDeviceToken(flow.deviceCode), { kind: "pending" });
      assert.deepEqual(await upstream.pollDeviceToken(flow.deviceCode), { kind: "pending" });
      gitlab.approve(flow.userCode);
      const result = await upstream.pollDeviceToken(flow.deviceCode);
      assert.equal(result.kind, "token");
      if (result.kind !== "token") return;
      secrets.add(result.tokens.accessToken).add(result.tokens.refreshToken);
      assert.match(result.tokens.accessToken, /^[0-9a-f]{64}$/);
      assert.match(result.tokens.refreshToken, /^[0-9a-f]{64}$/);
      assert.equal(result.tokens.expiresInSeconds, 7200);
      assert.deepEqual(await upstream.fetchUser(result.tokens.accessToken), {
        id: "4242",
        username: "ada",
      });

      await t.step("a consumed device code is invalid_grant (terminal)", async () => {
        await assertUpstreamError(
          upstream.pollDeviceToken(flow.deviceCode),
          "terminal",
          "invalid_grant",
        );
      });
    });

    await t.step("slow_down", async () => {
      const flow = await startFlow(upstream);
      gitlab.failNext("token", "slow_down");
      assert.deepEqual(await upstream.pollDeviceToken(flow.deviceCode), { kind: "slow_down" });
      assert.deepEqual(await upstream.pollDeviceToken(flow.deviceCode), { kind: "pending" });
    });

    await t.step("denied is access_denied (terminal)", async () => {
      const flow = await startFlow(upstream);
      gitlab.deny(flow.userCode);
      await assertUpstreamError(
        upstream.pollDeviceToken(flow.deviceCode),
        "terminal",
        "access_denied",
      );
    });

    await t.step("expired is expired_token (terminal)", async () => {
      const flow = await startFlow(upstream);
      gitlab.expireDevice(flow.userCode);
      await assertUpstreamError(
        upstream.pollDeviceToken(flow.deviceCode),
        "terminal",
        "expired_token",
      );
    });

    await t.step("an unknown device code is invalid_grant (terminal)", async () => {
      await assertUpstreamError(
        upstream.pollDeviceToken("no-such-device-code"),
        "terminal",
        "invalid_grant",
      );
    });

    await t.step("a token response without refresh_token gives an empty one", async () => {
      const flow = await startFlow(upstream);
      gitlab.approve(flow.userCode);
      gitlab.failNext("token", "no_refresh_token");
      const result = await upstream.pollDeviceToken(flow.deviceCode);
      assert.equal(result.kind, "token");
      if (result.kind !== "token") return;
      secrets.add(result.tokens.accessToken);
      assert.equal(result.tokens.refreshToken, "");
    });

    await t.step("an unknown client id is invalid_client (terminal)", async () => {
      const other = startSimulatedGitLab({ clientId: "the-real-client" });
      try {
        await assertUpstreamError(
          clientFor(other).startDeviceAuthorization(),
          "terminal",
          "invalid_client",
        );
      } finally {
        await other.close();
      }
    });

    assert.equal(gitlab.calls.deviceToken, 10);
  });
});

Deno.test("transient failures of the token endpoint", async (t) => {
  await withGitLab(async (gitlab) => {
    const logs: LogLine[] = [];
    const upstream = clientFor(gitlab, { timeoutMs: 200 }, logs);
    const flow = await startFlow(upstream);

    for (
      const [mode, code] of [
        ["500", "http_500"],
        ["malformed", "malformed"],
        ["timeout", "timeout"],
      ] as const
    ) {
      await t.step(`${mode} is transient ${code}`, async () => {
        gitlab.failNext("token", mode);
        await assertUpstreamError(upstream.pollDeviceToken(flow.deviceCode), "transient", code);
        // The flow is untouched: the next poll is an ordinary one.
        assert.deepEqual(await upstream.pollDeviceToken(flow.deviceCode), { kind: "pending" });
      });
    }

    await t.step("429 is a rate_limited answer with its Retry-After, not an error", async () => {
      gitlab.failNext("token", "429");
      assert.deepEqual(await upstream.pollDeviceToken(flow.deviceCode), {
        kind: "rate_limited",
        backoff: { retryAfterSeconds: 1 },
      });
      assert.deepEqual(await upstream.pollDeviceToken(flow.deviceCode), { kind: "pending" });
    });

    await t.step("each transient failure was logged, without secrets", () => {
      assert.deepEqual(logs.map((line) => line.fields?.code), [
        "http_500",
        "malformed",
        "timeout",
      ]);
      assert.ok(logs.every((line) => line.fields?.operation === "poll_device_token"));
      assertNoSecrets(JSON.stringify(logs));
    });
  });
});

Deno.test("transient failures of the other endpoints", async (t) => {
  await withGitLab(async (gitlab) => {
    const upstream = clientFor(gitlab, { timeoutMs: 200 });
    const tokens = gitlab.issueTokens();
    secrets.add(tokens.accessToken).add(tokens.refreshToken);

    for (
      const [mode, code] of [
        ["500", "http_500"],
        ["429", "http_429"],
        ["malformed", "malformed"],
        ["timeout", "timeout"],
      ] as const
    ) {
      await t.step(`${mode} is transient ${code}`, async () => {
        gitlab.failNext("authorize_device", mode);
        await assertUpstreamError(upstream.startDeviceAuthorization(), "transient", code);
        gitlab.failNext("user", mode);
        await assertUpstreamError(upstream.fetchUser(tokens.accessToken), "transient", code);
        gitlab.failNext("refresh", mode);
        await assertUpstreamError(upstream.refreshTokens(tokens.refreshToken), "transient", code);
      });
    }

    await t.step("the refresh token survived the failures", async () => {
      const renewed = await upstream.refreshTokens(tokens.refreshToken);
      secrets.add(renewed.accessToken).add(renewed.refreshToken);
      assert.notEqual(renewed.accessToken, tokens.accessToken);
    });
  });
});

Deno.test("connection refused is transient network", async () => {
  const gitlab = startSimulatedGitLab();
  await gitlab.close();
  const upstream = clientFor(gitlab);
  await assertUpstreamError(upstream.startDeviceAuthorization(), "transient", "network");
  await assertUpstreamError(upstream.pollDeviceToken("some-device-code"), "transient", "network");
  await assertUpstreamError(upstream.refreshTokens("some-refresh-token"), "transient", "network");
  await assertUpstreamError(upstream.fetchUser("some-access-token"), "transient", "network");
});

Deno.test("refresh-token grant", async (t) => {
  await withGitLab(async (gitlab) => {
    const upstream = clientFor(gitlab);
    const first = gitlab.issueTokens();
    secrets.add(first.accessToken).add(first.refreshToken);

    await t.step("success rotates both tokens", async (t) => {
      const second = await upstream.refreshTokens(first.refreshToken);
      secrets.add(second.accessToken).add(second.refreshToken);
      assert.notEqual(second.accessToken, first.accessToken);
      assert.notEqual(second.refreshToken, first.refreshToken);
      assert.equal(second.expiresInSeconds, 7200);
      assert.deepEqual(await upstream.fetchUser(second.accessToken), {
        id: "4242",
        username: "ada",
      });
      assert.equal(gitlab.calls.refresh, 1);

      await t.step("the used refresh token is dead: invalid_grant (terminal)", async () => {
        await assertUpstreamError(
          upstream.refreshTokens(first.refreshToken),
          "terminal",
          "invalid_grant",
        );
      });

      await t.step("so is the old access token: invalid_token (terminal)", async () => {
        await assertUpstreamError(
          upstream.fetchUser(first.accessToken),
          "terminal",
          "invalid_token",
        );
      });

      await t.step("the new refresh token works once more", async () => {
        const third = await upstream.refreshTokens(second.refreshToken);
        secrets.add(third.accessToken).add(third.refreshToken);
        assert.notEqual(third.refreshToken, second.refreshToken);
      });
    });

    await t.step("an unknown refresh token is invalid_grant (terminal)", async () => {
      await assertUpstreamError(
        upstream.refreshTokens("not-a-refresh-token"),
        "terminal",
        "invalid_grant",
      );
    });

    await t.step("a revoked refresh token is invalid_grant (terminal)", async () => {
      const pair = gitlab.issueTokens();
      secrets.add(pair.accessToken).add(pair.refreshToken);
      gitlab.revoke(pair.refreshToken);
      await assertUpstreamError(
        upstream.refreshTokens(pair.refreshToken),
        "terminal",
        "invalid_grant",
      );
    });

    await t.step("a refresh without a new refresh token gives an empty one", async () => {
      const pair = gitlab.issueTokens();
      secrets.add(pair.accessToken).add(pair.refreshToken);
      gitlab.failNext("refresh", "no_refresh_token");
      const renewed = await upstream.refreshTokens(pair.refreshToken);
      secrets.add(renewed.accessToken);
      assert.equal(renewed.refreshToken, "");
    });
  });
});

Deno.test("current user", async (t) => {
  const users = [
    { id: 4242, username: "ada", name: "Ada Lovelace" },
    { id: 7, username: "grace", name: "Grace Hopper" },
  ];
  await withGitLab(async (gitlab) => {
    const upstream = clientFor(gitlab);

    await t.step("ok", async () => {
      const tokens = gitlab.issueTokens(7);
      secrets.add(tokens.accessToken).add(tokens.refreshToken);
      assert.deepEqual(await upstream.fetchUser(tokens.accessToken), {
        id: "7",
        username: "grace",
      });
      assert.equal(gitlab.calls.user, 1);
    });

    await t.step("401 is invalid_token (terminal)", async () => {
      await assertUpstreamError(upstream.fetchUser("not-a-token"), "terminal", "invalid_token");
    });

    await t.step("500 is transient", async () => {
      const tokens = gitlab.issueTokens();
      secrets.add(tokens.accessToken).add(tokens.refreshToken);
      gitlab.failNext("user", "500");
      await assertUpstreamError(upstream.fetchUser(tokens.accessToken), "transient", "http_500");
    });
  }, { users });

  await t.step("an expired access token is invalid_token (terminal)", async () => {
    await withGitLab(async (gitlab) => {
      const tokens = gitlab.issueTokens();
      secrets.add(tokens.accessToken).add(tokens.refreshToken);
      await assertUpstreamError(
        clientFor(gitlab).fetchUser(tokens.accessToken),
        "terminal",
        "invalid_token",
      );
    }, { accessTokenTtlSeconds: 0 });
  });
});

// ---------------------------------------------------------------------------------------------
// Canned responses

interface Recorded {
  url: string;
  method: string;
  headers: Headers;
  body: string;
}

/** A fetch that records requests and answers from a list (the last answer repeats). */
function cannedFetch(answers: (() => Response)[]): { fetch: typeof fetch; requests: Recorded[] } {
  const requests: Recorded[] = [];
  const fetchImpl = async (input: string | URL | Request, init?: RequestInit) => {
    const request = new Request(input, init);
    requests.push({
      url: request.url,
      method: request.method,
      headers: request.headers,
      body: await request.text(),
    });
    return answers[Math.min(requests.length - 1, answers.length - 1)]();
  };
  return { fetch: fetchImpl as typeof fetch, requests };
}

function jsonResponse(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json" },
  });
}

function cannedClient(
  answers: (() => Response)[],
  gitlabUrl = "https://gitlab.example",
): { upstream: Upstream; requests: Recorded[]; logs: LogLine[] } {
  const { fetch, requests } = cannedFetch(answers);
  const logs: LogLine[] = [];
  const upstream = createGitLabUpstream({
    gitlabUrl: new URL(gitlabUrl),
    clientId: CLIENT_ID,
    scopes: "api read_user",
    timeoutMs: 1000,
    fetch,
    logger: { warn: (message, fields) => logs.push({ message, fields }) },
  });
  return { upstream, requests, logs };
}

const DEVICE_AUTHORIZATION = {
  device_code: "dc-canned",
  user_code: "ABCD-1234",
  verification_uri: "https://gitlab.example/oauth/device",
  expires_in: 600,
};

Deno.test("requests: URLs under a sub-path, headers and forms", async (t) => {
  for (const base of ["https://gitlab.example/gitlab", "https://gitlab.example/gitlab/"]) {
    await t.step(base, async () => {
      const { upstream, requests } = cannedClient([
        () => jsonResponse(200, DEVICE_AUTHORIZATION),
        () => jsonResponse(400, { error: "authorization_pending" }),
        () => jsonResponse(200, { access_token: "at-canned", refresh_token: "rt-canned" }),
        () => jsonResponse(200, { id: 1, username: "root" }),
      ], base);
      await upstream.startDeviceAuthorization();
      await upstream.pollDeviceToken("dc-canned");
      await upstream.refreshTokens("rt-old");
      await upstream.fetchUser("at-canned");

      assert.deepEqual(requests.map((request) => `${request.method} ${request.url}`), [
        "POST https://gitlab.example/gitlab/oauth/authorize_device",
        "POST https://gitlab.example/gitlab/oauth/token",
        "POST https://gitlab.example/gitlab/oauth/token",
        "GET https://gitlab.example/gitlab/api/v4/user",
      ]);
      for (const request of requests) {
        assert.equal(request.headers.get("Accept"), "application/json");
      }
      const forms = requests.slice(0, 3).map((request) =>
        Object.fromEntries(new URLSearchParams(request.body))
      );
      assert.deepEqual(forms, [
        { client_id: CLIENT_ID, scope: "api read_user" },
        {
          grant_type: "urn:ietf:params:oauth:grant-type:device_code",
          device_code: "dc-canned",
          client_id: CLIENT_ID,
        },
        { grant_type: "refresh_token", refresh_token: "rt-old", client_id: CLIENT_ID },
      ]);
      assert.match(
        requests[0].headers.get("Content-Type") ?? "",
        /^application\/x-www-form-urlencoded/,
      );
      assert.equal(requests[3].headers.get("Authorization"), "Bearer at-canned");
    });
  }
});

Deno.test("responses: validation of the device authorization", async (t) => {
  await t.step("interval defaults to 5; verification_uri_complete is optional", async () => {
    const { upstream } = cannedClient([() => jsonResponse(200, DEVICE_AUTHORIZATION)]);
    assert.deepEqual(await upstream.startDeviceAuthorization(), {
      deviceCode: "dc-canned",
      userCode: "ABCD-1234",
      verificationUri: "https://gitlab.example/oauth/device",
      expiresInSeconds: 600,
      intervalSeconds: 5,
    });
  });

  const broken: [string, Record<string, unknown>][] = [
    ["no device_code", { ...DEVICE_AUTHORIZATION, device_code: undefined }],
    ["numeric user_code", { ...DEVICE_AUTHORIZATION, user_code: 1234 }],
    ["no verification_uri", { ...DEVICE_AUTHORIZATION, verification_uri: undefined }],
    ["javascript: verification_uri", {
      ...DEVICE_AUTHORIZATION,
      verification_uri: "javascript:alert(1)",
    }],
    ["relative verification_uri_complete", {
      ...DEVICE_AUTHORIZATION,
      verification_uri_complete: "/oauth/device?user_code=x",
    }],
    ["zero expires_in", { ...DEVICE_AUTHORIZATION, expires_in: 0 }],
    ["string expires_in", { ...DEVICE_AUTHORIZATION, expires_in: "600" }],
    ["string interval", { ...DEVICE_AUTHORIZATION, interval: "5" }],
  ];
  for (const [name, body] of broken) {
    await t.step(`${name} is transient malformed`, async () => {
      const { upstream } = cannedClient([() => jsonResponse(200, body)]);
      await assertUpstreamError(upstream.startDeviceAuthorization(), "transient", "malformed");
    });
  }

  await t.step("a JSON array is transient malformed", async () => {
    const { upstream } = cannedClient([() => jsonResponse(200, [DEVICE_AUTHORIZATION])]);
    await assertUpstreamError(upstream.startDeviceAuthorization(), "transient", "malformed");
  });

  await t.step("invalid_scope is terminal", async () => {
    const { upstream } = cannedClient([() => jsonResponse(400, { error: "invalid_scope" })]);
    await assertUpstreamError(upstream.startDeviceAuthorization(), "terminal", "invalid_scope");
  });

  await t.step("a redirect is not followed and is transient", async () => {
    const { upstream, requests } = cannedClient([
      () => new Response(null, { status: 302, headers: { Location: "https://elsewhere/" } }),
    ]);
    await assertUpstreamError(upstream.startDeviceAuthorization(), "transient", "http_302");
    assert.equal(requests.length, 1);
  });
});

Deno.test("responses: classification of token errors", async (t) => {
  const cases: [number, unknown, "terminal" | "transient", string][] = [
    [400, { error: "invalid_request" }, "terminal", "invalid_request"],
    [401, { error: "invalid_client" }, "terminal", "invalid_client"],
    [400, { error: "invalid_scope" }, "terminal", "invalid_scope"],
    [400, { error: "unsupported_grant_type" }, "transient", "unsupported_grant_type"],
    [400, { error: "temporarily_unavailable" }, "transient", "temporarily_unavailable"],
    [
      400,
      { error: "token_expired_or_denied_invalid" },
      "transient",
      "token_expired_or_denied_invalid",
    ],
    [400, { error: 42 }, "transient", "http_400"],
    [400, { error: "has spaces and <html>" }, "transient", "http_400"],
    [400, "not json", "transient", "http_400"],
    [404, { message: "404 Not Found" }, "transient", "http_404"],
    [502, { error: "invalid_grant" }, "transient", "http_502"],
    [503, "<html>down</html>", "transient", "http_503"],
  ];
  for (const [status, body, failure, code] of cases) {
    await t.step(`${status} ${JSON.stringify(body)} is ${failure} ${code}`, async () => {
      const answer = () =>
        typeof body === "string" ? new Response(body, { status }) : jsonResponse(status, body);
      const { upstream } = cannedClient([answer]);
      await assertUpstreamError(upstream.pollDeviceToken("dc"), failure, code);
      await assertUpstreamError(upstream.refreshTokens("rt"), failure, code);
    });
  }

  await t.step(
    '429 {"error":"invalid_request"}: the refresh is transient http_429, the device poll rate_limited',
    async () => {
      const { upstream } = cannedClient([
        () => jsonResponse(429, { error: "invalid_request" }),
        () => jsonResponse(429, { error: "invalid_request" }),
      ]);
      await assertUpstreamError(upstream.refreshTokens("rt"), "transient", "http_429");
      assert.deepEqual(await upstream.pollDeviceToken("dc"), { kind: "rate_limited", backoff: {} });
    },
  );

  await t.step("authorization_pending on the refresh grant is not a success", async () => {
    const { upstream } = cannedClient([
      () => jsonResponse(400, { error: "authorization_pending" }),
    ]);
    await assertUpstreamError(upstream.refreshTokens("rt"), "transient", "authorization_pending");
  });

  const brokenTokens: [string, unknown][] = [
    ["no access_token", { refresh_token: "x" }],
    ["empty access_token", { access_token: "" }],
    ["numeric refresh_token", { access_token: "x", refresh_token: 5 }],
    ["string expires_in", { access_token: "x", expires_in: "7200" }],
    ["negative expires_in", { access_token: "x", expires_in: -1 }],
    ["a MAC token", { access_token: "x", token_type: "mac" }],
  ];
  for (const [name, body] of brokenTokens) {
    await t.step(`${name} is transient malformed`, async () => {
      const { upstream } = cannedClient([() => jsonResponse(200, body)]);
      await assertUpstreamError(upstream.pollDeviceToken("dc"), "transient", "malformed");
      await assertUpstreamError(upstream.refreshTokens("rt"), "transient", "malformed");
    });
  }

  await t.step("null refresh_token and expires_in count as absent", async () => {
    const { upstream } = cannedClient([
      () =>
        jsonResponse(200, {
          access_token: "x",
          token_type: "bearer",
          refresh_token: null,
          expires_in: null,
        }),
    ]);
    assert.deepEqual(await upstream.refreshTokens("rt"), { accessToken: "x", refreshToken: "" });
  });
});

Deno.test("responses: the current user", async (t) => {
  const cases: [number, unknown, "terminal" | "transient", string][] = [
    [401, { message: "401 Unauthorized" }, "terminal", "invalid_token"],
    [403, { message: "403 Forbidden - insufficient_scope" }, "terminal", "invalid_token"],
    [404, { message: "404 Not Found" }, "transient", "http_404"],
    [429, "Retry later", "transient", "http_429"],
    [500, "oops", "transient", "http_500"],
    [200, { id: "", username: "ada" }, "transient", "malformed"],
    [200, { id: { n: 4242 }, username: "ada" }, "transient", "malformed"],
    [200, { id: 1.5, username: "ada" }, "transient", "malformed"],
    [200, { id: 4242 }, "transient", "malformed"],
    [200, "<!DOCTYPE html>", "transient", "malformed"],
  ];
  for (const [status, body, failure, code] of cases) {
    await t.step(`${status} ${JSON.stringify(body)} is ${failure} ${code}`, async () => {
      const answer = () =>
        typeof body === "string" ? new Response(body, { status }) : jsonResponse(status, body);
      const { upstream } = cannedClient([answer]);
      await assertUpstreamError(upstream.fetchUser("at"), failure, code);
    });
  }
});

Deno.test("no token from a response body reaches an error message or a log line", async (t) => {
  const secret = "glpat-SECRET-0123456789abcdef";
  secrets.add(secret);
  const answers: [string, () => Response][] = [
    ["error_description", () =>
      jsonResponse(400, {
        error: "invalid_grant",
        error_description: `refresh token ${secret} was revoked`,
      })],
    [
      "unknown error code",
      () => jsonResponse(400, { error: "weird", error_description: `token ${secret}` }),
    ],
    [
      "token in a 500 body",
      () => new Response(`upstream exploded near ${secret}`, { status: 500 }),
    ],
    [
      "token in a malformed 200",
      () => jsonResponse(200, { access_token: secret, token_type: "mac", refresh_token: secret }),
    ],
    ["token as the error code", () => jsonResponse(400, { error: secret })],
  ];
  for (const [name, answer] of answers) {
    await t.step(name, async () => {
      const { upstream, logs } = cannedClient([answer]);
      for (
        const call of [() => upstream.pollDeviceToken(secret), () => upstream.refreshTokens(secret)]
      ) {
        const error = await call().then(
          () => assert.fail("expected a failure"),
          (error: unknown) => error,
        );
        assert.ok(error instanceof UpstreamError);
        assert.ok(!error.message.includes(secret), error.message);
        assert.ok(!error.code.includes(secret), error.code);
      }
      assertNoSecrets(JSON.stringify(logs));
    });
  }

  await t.step("the bearer token is not logged when the user call fails", async () => {
    const { upstream, logs } = cannedClient([() => new Response("nope", { status: 502 })]);
    await assertUpstreamError(upstream.fetchUser(secret), "transient", "http_502");
    assert.equal(logs.length, 1);
    assertNoSecrets(JSON.stringify(logs));
  });
});

Deno.test("options are checked", () => {
  const base = {
    gitlabUrl: new URL("https://gitlab.example"),
    clientId: CLIENT_ID,
    scopes: "api",
    timeoutMs: 1000,
  };
  assert.throws(() => createGitLabUpstream({ ...base, clientId: "" }), TypeError);
  assert.throws(() => createGitLabUpstream({ ...base, timeoutMs: 0 }), RangeError);
  assert.throws(
    () => createGitLabUpstream({ ...base, gitlabUrl: new URL("ftp://gitlab.example") }),
    TypeError,
  );
});

Deno.test("a server that never answers times out before the headers too", async () => {
  const hangingFetch =
    ((_input: string | URL | Request, init?: RequestInit) =>
      new Promise<Response>((_resolve, reject) => {
        const signal = init?.signal;
        assert.ok(signal, "every request carries a timeout signal");
        signal.addEventListener("abort", () => reject(signal.reason), { once: true });
      })) as typeof fetch;
  const upstream = createGitLabUpstream({
    gitlabUrl: new URL("https://gitlab.example"),
    clientId: CLIENT_ID,
    scopes: "api",
    timeoutMs: 50,
    fetch: hangingFetch,
  });
  await assertUpstreamError(upstream.pollDeviceToken("dc"), "transient", "timeout");
  await assertUpstreamError(upstream.fetchUser("at"), "transient", "timeout");
});

Deno.test("responses: the device poll surfaces GitLab's rate limit from its status and headers, never its text", async (t) => {
  const pendingBody = { error: "authorization_pending" };
  const token = { access_token: "at-rl", token_type: "Bearer", refresh_token: "rt-rl" };
  const answer = (status: number, body: unknown, headers: Record<string, string>) => () =>
    new Response(JSON.stringify(body), {
      status,
      headers: { "Content-Type": "application/json", ...headers },
    });
  const cases: [string, () => Response, unknown][] = [
    ["429 without headers", answer(429, {}, {}), { kind: "rate_limited", backoff: {} }],
    [
      "429 Retry-After: 30",
      answer(429, {}, { "Retry-After": "30" }),
      { kind: "rate_limited", backoff: { retryAfterSeconds: 30 } },
    ],
    [
      "429 Retry-After as an HTTP date",
      answer(429, {}, { "Retry-After": "Thu, 01 Jan 2026 00:00:30 GMT" }),
      { kind: "rate_limited", backoff: { resumeAtEpochSeconds: 1767225630 } },
    ],
    [
      "429 RateLimit-Reset as a Unix time (GitLab)",
      answer(429, {}, { "RateLimit-Reset": "1767225630", "RateLimit-Remaining": "0" }),
      { kind: "rate_limited", backoff: { resumeAtEpochSeconds: 1767225630 } },
    ],
    [
      "429 RateLimit-Reset in seconds (IETF draft)",
      answer(429, {}, { "RateLimit-Reset": "42" }),
      { kind: "rate_limited", backoff: { retryAfterSeconds: 42 } },
    ],
    [
      "429 Retry-After wins over RateLimit-Reset",
      answer(429, {}, { "Retry-After": "7", "RateLimit-Reset": "1767225630" }),
      { kind: "rate_limited", backoff: { retryAfterSeconds: 7 } },
    ],
    [
      "429 with unreadable headers",
      answer(429, {}, { "Retry-After": "soon", "RateLimit-Reset": "-5" }),
      { kind: "rate_limited", backoff: {} },
    ],
    [
      "429 whose body says slow_down is still the rate limit",
      answer(429, { error: "slow_down" }, { "Retry-After": "3" }),
      { kind: "rate_limited", backoff: { retryAfterSeconds: 3 } },
    ],
    [
      "pending with RateLimit-Remaining: 0",
      answer(400, pendingBody, { "RateLimit-Remaining": "0", "RateLimit-Reset": "1767225690" }),
      { kind: "pending", backoff: { resumeAtEpochSeconds: 1767225690 } },
    ],
    [
      "pending with requests remaining",
      answer(400, pendingBody, { "RateLimit-Remaining": "5", "RateLimit-Reset": "1767225690" }),
      { kind: "pending" },
    ],
    [
      "a token with RateLimit-Remaining: 0 and no reset",
      answer(200, token, { "RateLimit-Remaining": "0" }),
      { kind: "token", tokens: { accessToken: "at-rl", refreshToken: "rt-rl" }, backoff: {} },
    ],
  ];
  for (const [name, response, expected] of cases) {
    await t.step(name, async () => {
      const { upstream } = cannedClient([response]);
      assert.deepEqual(await upstream.pollDeviceToken("dc"), expected);
    });
  }
});
