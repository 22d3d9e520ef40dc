/**
 * The simulated GitLab on its own, over plain fetch: the verification page a person (or a
 * browser test) uses, and the endpoint behaviour the demo and the end-to-end tests rely on.
 */

import assert from "node:assert/strict";
import { type SimulatedGitLab, startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { FakeClock } from "./_helpers.ts";
import { withGitLab } from "./_service.ts";

const DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code";

interface Answer {
  status: number;
  contentType: string;
  text: string;
}

/** Sends a request and always reads the whole body. */
async function send(
  gitlab: SimulatedGitLab,
  path: string,
  init: { method?: string; form?: Record<string, string>; headers?: HeadersInit } = {},
): Promise<Answer> {
  const response = await fetch(new URL(path, gitlab.url), {
    method: init.method ?? (init.form ? "POST" : "GET"),
    headers: init.headers,
    body: init.form ? new URLSearchParams(init.form) : undefined,
  });
  return {
    status: response.status,
    contentType: response.headers.get("Content-Type") ?? "",
    text: await response.text(),
  };
}

async function startDevice(gitlab: SimulatedGitLab) {
  const answer = await send(gitlab, "/oauth/authorize_device", {
    form: { client_id: "app", scope: "read_user" },
  });
  assert.equal(answer.status, 200);
  return JSON.parse(answer.text) as {
    device_code: string;
    user_code: string;
    verification_uri: string;
    verification_uri_complete: string;
    expires_in: number;
    interval: number;
  };
}

async function poll(gitlab: SimulatedGitLab, deviceCode: string) {
  const answer = await send(gitlab, "/oauth/token", {
    form: { grant_type: DEVICE_GRANT, device_code: deviceCode, client_id: "app" },
  });
  return { status: answer.status, body: JSON.parse(answer.text) as Record<string, unknown> };
}

Deno.test("verification page", async (t) => {
  await withGitLab(async (gitlab) => {
    await t.step("GET shows the form, prefilled from user_code", async () => {
      const answer = await send(gitlab, "/oauth/device?user_code=WXYZ-0001");
      assert.equal(answer.status, 200);
      assert.match(answer.contentType, /^text\/html/);
      assert.match(answer.text, /<title>Device authorization[^<]*<\/title>/);
      assert.match(answer.text, /<label for="user_code">User code<\/label>/);
      assert.match(answer.text, /<input id="user_code" name="user_code" value="WXYZ-0001"/);
      assert.match(answer.text, /<form method="post" action="\/oauth\/device">/);
      assert.match(answer.text, /<button type="submit" name="action" value="approve">Authorize</);
      assert.match(answer.text, /<button [^>]*value="deny"[^>]*>Deny</);
    });

    await t.step("GET without user_code shows an empty field", async () => {
      const answer = await send(gitlab, "/oauth/device");
      assert.match(answer.text, /<input id="user_code" name="user_code" value=""/);
    });

    await t.step("POST Approve shows success and releases the tokens", async (t) => {
      const device = await startDevice(gitlab);
      assert.equal(
        device.verification_uri_complete,
        `${device.verification_uri}?user_code=${device.user_code}`,
      );
      const page = await send(gitlab, new URL(device.verification_uri_complete).pathname + "?x", {
        method: "GET",
      });
      assert.equal(page.status, 200);
      // Codes are matched like GitLab users type them: any case, dash optional.
      const typed = device.user_code.replace("-", "").toLowerCase();
      const answer = await send(gitlab, "/oauth/device", {
        form: { user_code: typed, action: "approve" },
      });
      assert.equal(answer.status, 200);
      assert.match(answer.text, /Device approved — you can return to the application/);
      const { status, body } = await poll(gitlab, device.device_code);
      assert.equal(status, 200);
      assert.equal(body.token_type, "Bearer");
      assert.equal(typeof body.access_token, "string");
      assert.equal(typeof body.refresh_token, "string");

      await t.step("the same code again is already used", async () => {
        const again = await send(gitlab, "/oauth/device", {
          form: { user_code: device.user_code, action: "approve" },
        });
        assert.equal(again.status, 400);
        assert.match(again.text, /already been used/);
      });
    });

    await t.step("POST Deny shows the denial and the poll says access_denied", async () => {
      const device = await startDevice(gitlab);
      const answer = await send(gitlab, "/oauth/device", {
        form: { user_code: device.user_code, action: "deny" },
      });
      assert.equal(answer.status, 200);
      assert.match(answer.text, /Device denied/);
      const { status, body } = await poll(gitlab, device.device_code);
      assert.equal(status, 400);
      assert.equal(body.error, "access_denied");
    });

    await t.step("an expired code is refused", async () => {
      const device = await startDevice(gitlab);
      gitlab.expireDevice(device.user_code);
      const answer = await send(gitlab, "/oauth/device", {
        form: { user_code: device.user_code, action: "approve" },
      });
      assert.equal(answer.status, 400);
      assert.match(answer.text, /expired/);
    });

    await t.step("an unknown code is refused", async () => {
      const answer = await send(gitlab, "/oauth/device", {
        form: { user_code: "NOPE-0000", action: "approve" },
      });
      assert.equal(answer.status, 404);
      assert.match(answer.text, /Unknown user code/);
    });

    await t.step("a missing code or action is refused", async () => {
      const noCode = await send(gitlab, "/oauth/device", { form: { action: "approve" } });
      assert.equal(noCode.status, 400);
      const noAction = await send(gitlab, "/oauth/device", { form: { user_code: "ABCD-1234" } });
      assert.equal(noAction.status, 400);
    });

    await t.step("everything put in the page is escaped", async () => {
      const weird = `"><script>alert('x')</script>&amp;`;
      const escaped = "&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;amp;";
      const form = await send(gitlab, `/oauth/device?user_code=${encodeURIComponent(weird)}`);
      assert.ok(!form.text.includes("<script>"));
      assert.ok(form.text.includes(`value="${escaped}"`));
      const unknown = await send(gitlab, "/oauth/device", {
        form: { user_code: weird, action: "approve" },
      });
      assert.equal(unknown.status, 404);
      assert.ok(!unknown.text.includes("<script>"));
      assert.ok(unknown.text.includes(`Unknown user code “${escaped}”`));
      assert.ok(unknown.text.includes(`value="${escaped}"`));
    });

    await t.step("pages forbid scripts", async () => {
      const response = await fetch(new URL("/oauth/device", gitlab.url));
      await response.body?.cancel();
      assert.match(response.headers.get("Content-Security-Policy") ?? "", /default-src 'none'/);
    });

    assert.ok(gitlab.calls.devicePage >= 10);
  });
});

Deno.test("simulated endpoints", async (t) => {
  await withGitLab(async (gitlab) => {
    await t.step("authorize_device without client_id is 401 invalid_client", async () => {
      const answer = await send(gitlab, "/oauth/authorize_device", { form: { scope: "api" } });
      assert.equal(answer.status, 401);
      assert.equal(JSON.parse(answer.text).error, "invalid_client");
    });

    await t.step("authorize_device answers like GitLab", async () => {
      const device = await startDevice(gitlab);
      assert.match(device.user_code, /^[A-Z]{4}-\d{4}$/);
      assert.equal(device.verification_uri, new URL("/oauth/device", gitlab.url).href);
      assert.equal(device.expires_in, 300);
      assert.equal(device.interval, 5);
      assert.equal(gitlab.lastUserCode(), device.user_code);
    });

    await t.step("pending, then approved, then consumed", async () => {
      const device = await startDevice(gitlab);
      const pending = await poll(gitlab, device.device_code);
      assert.equal(pending.status, 400);
      assert.equal(pending.body.error, "authorization_pending");
      assert.equal(typeof pending.body.error_description, "string");
      gitlab.approve(device.user_code);
      const granted = await poll(gitlab, device.device_code);
      assert.equal(granted.status, 200);
      assert.deepEqual(Object.keys(granted.body).sort(), [
        "access_token",
        "created_at",
        "expires_in",
        "refresh_token",
        "scope",
        "token_type",
      ]);
      assert.equal(granted.body.scope, "read_user");
      const consumed = await poll(gitlab, device.device_code);
      assert.equal(consumed.status, 400);
      assert.equal(consumed.body.error, "invalid_grant");
    });

    await t.step("an unsupported grant type is refused", async () => {
      const answer = await send(gitlab, "/oauth/token", {
        form: { grant_type: "password", client_id: "app" },
      });
      assert.equal(answer.status, 400);
      assert.equal(JSON.parse(answer.text).error, "unsupported_grant_type");
    });

    await t.step("user, revocation and 401s", async () => {
      const tokens = gitlab.issueTokens();
      assert.equal(tokens.expiresIn, 7200);
      const auth = { Authorization: `Bearer ${tokens.accessToken}` };
      const user = await send(gitlab, "/api/v4/user", { headers: auth });
      assert.equal(user.status, 200);
      assert.deepEqual(
        (({ id, username, name }) => ({ id, username, name }))(JSON.parse(user.text)),
        { id: 4242, username: "ada", name: "Ada Lovelace" },
      );
      const anonymous = await send(gitlab, "/api/v4/user");
      assert.equal(anonymous.status, 401);
      assert.deepEqual(JSON.parse(anonymous.text), { message: "401 Unauthorized" });
      const projects = await send(gitlab, "/api/v4/projects", {
        headers: { "Private-Token": tokens.accessToken },
      });
      assert.equal(projects.status, 200);
      assert.deepEqual(
        JSON.parse(projects.text).map((p: { path_with_namespace: string }) =>
          p.path_with_namespace
        ),
        ["ada/handbook", "ada/website"],
      );
      assert.equal((await send(gitlab, "/api/v4/projects")).status, 401);

      const revoked = await send(gitlab, "/oauth/revoke", { form: { token: tokens.accessToken } });
      assert.equal(revoked.status, 200);
      assert.ok(gitlab.revokedTokens.has(tokens.accessToken));
      assert.equal((await send(gitlab, "/api/v4/user", { headers: auth })).status, 401);
      const refresh = await send(gitlab, "/oauth/token", {
        form: { grant_type: "refresh_token", refresh_token: tokens.refreshToken, client_id: "x" },
      });
      assert.equal(refresh.status, 400);
      assert.equal(JSON.parse(refresh.text).error, "invalid_grant");

      const unknown = await send(gitlab, "/oauth/revoke", { form: { token: "whatever" } });
      assert.equal(unknown.status, 200);
    });

    await t.step("unknown paths are 404", async () => {
      const answer = await send(gitlab, "/api/v4/groups");
      assert.equal(answer.status, 404);
    });

    await t.step("test controls refuse what they cannot do", () => {
      assert.throws(() => gitlab.approve("NOPE-0000"), /unknown/);
      assert.throws(() => gitlab.deny("NOPE-0000"), /unknown/);
      assert.throws(() => gitlab.expireDevice("NOPE-0000"), /unknown/);
      assert.throws(() => gitlab.failNext("user", "slow_down"), TypeError);
      assert.throws(() => gitlab.failNext("authorize_device", "no_refresh_token"), TypeError);
      assert.throws(() => gitlab.issueTokens(1), /no user/);
    });

    await t.step("calls are counted per endpoint", () => {
      assert.deepEqual(gitlab.calls, {
        authorizeDevice: 3,
        deviceToken: 3,
        refresh: 1,
        user: 3,
        projects: 2,
        revoke: 2,
        devicePage: 0,
        authorizePage: 0,
        authorizationCode: 0,
      });
    });
  });
});

Deno.test("close ends a stalled response and is idempotent", async () => {
  const gitlab = startSimulatedGitLab();
  gitlab.failNext("user", "timeout");
  const response = await fetch(new URL("/api/v4/user", gitlab.url));
  assert.equal(response.status, 200);
  const body = response.text().catch(() => "(aborted)");
  await gitlab.close();
  await gitlab.close();
  assert.ok(["", "(aborted)"].includes(await body));
});

Deno.test("a fixed port and custom lifetimes", async () => {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = probe.addr.port;
  probe.close();
  const gitlab = startSimulatedGitLab({ port, deviceExpiresInSeconds: 60, interval: 1 });
  try {
    assert.equal(gitlab.url.href, `http://127.0.0.1:${port}/`);
    assert.equal(gitlab.url.origin, `http://127.0.0.1:${port}`);
    const device = await startDevice(gitlab);
    assert.equal(device.expires_in, 60);
    assert.equal(device.interval, 1);
  } finally {
    await gitlab.close();
  }
});

Deno.test("lifetimes run on the injected clock", async (t) => {
  const clock = new FakeClock();
  await withGitLab(async (gitlab) => {
    await t.step("a device code expires when the clock passes its lifetime", async () => {
      const device = await startDevice(gitlab);
      clock.advance(60_000 - 1);
      assert.equal((await poll(gitlab, device.device_code)).body.error, "authorization_pending");
      clock.advance(1);
      const expired = await poll(gitlab, device.device_code);
      assert.equal(expired.status, 400);
      assert.equal(expired.body.error, "expired_token");
      assert.throws(() => gitlab.approve(device.user_code), /expired/);
    });

    await t.step("tokens carry the clock's time and die with it", async () => {
      const device = await startDevice(gitlab);
      gitlab.approve(device.user_code);
      const granted = await poll(gitlab, device.device_code);
      assert.equal(granted.body.created_at, Math.floor(clock.now() / 1000));
      const auth = { Authorization: `Bearer ${granted.body.access_token}` };
      clock.advance(120_000 - 1);
      assert.equal((await send(gitlab, "/api/v4/user", { headers: auth })).status, 200);
      clock.advance(1);
      assert.equal((await send(gitlab, "/api/v4/user", { headers: auth })).status, 401);
    });
  }, { clock, deviceExpiresInSeconds: 60, accessTokenTtlSeconds: 120 });
});
