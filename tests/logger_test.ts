import assert from "node:assert/strict";
import { createLogger, redact } from "../src/logger.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  exchange,
  makeTestApp,
  poll,
  refresh,
  startFlow,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";

Deno.test("redact", async (t) => {
  await t.step("keeps at most 6 characters of any token", () => {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (let length = 0; length <= alphabet.length; length++) {
      const secret = alphabet.slice(0, length);
      const shown = redact(secret).replace("…", "");
      assert.ok(shown.length <= 6, `${length}: ${redact(secret)}`);
      assert.ok(secret.startsWith(shown), "what is kept is a prefix");
      if (length > 0) assert.notEqual(redact(secret), secret);
    }
  });
  await t.step("a long token keeps a 6-character prefix", () => {
    assert.equal(redact("abcdefghijklmnop"), "abcdef…");
  });
  await t.step("a short token shows nothing of itself", () => {
    assert.equal(redact("abcdefgh"), "…");
    assert.equal(redact("abc"), "…");
  });
  await t.step("nothing for nothing", () => {
    assert.equal(redact(""), "");
    assert.equal(redact(undefined), "");
  });
});

Deno.test("createLogger: the time is written as toISOString writes it, whatever the millisecond", () => {
  let now = 0;
  const times: string[] = [];
  const logger = createLogger((line) => times.push(JSON.parse(line).time), () => now);
  const instants = [
    Date.UTC(2026, 10, 26, 12, 4, 38, 0),
    Date.UTC(2026, 10, 26, 12, 4, 38, 7),
    Date.UTC(2026, 10, 26, 12, 4, 38, 42),
    Date.UTC(2026, 10, 26, 12, 4, 38, 999),
    Date.UTC(2026, 10, 26, 12, 4, 39, 0) + 0.75,
    Date.UTC(2026, 11, 31, 23, 59, 59, 999),
    Date.UTC(2027, 0, 1),
    -1,
    -1001.5,
    0,
    253402300800000, // 10000-01-01
  ];
  for (const instant of instants) {
    now = instant;
    logger.info("tick");
  }
  assert.deepEqual(times, instants.map((instant) => new Date(instant).toISOString()));
});

Deno.test("createLogger", async (t) => {
  const lines: string[] = [];
  const now = Date.parse("2026-01-02T03:04:05.678Z");
  const logger = createLogger((line) => lines.push(line), () => now);

  await t.step("one JSON line per call, with time, level, message and fields", () => {
    logger.info("hello", { a: 1, b: "two", c: true });
    logger.warn("careful");
    logger.error("broken", { error: "line one\nline two" });
    assert.equal(lines.length, 3);
    for (const line of lines) assert.doesNotMatch(line, /\n/);
    assert.deepEqual(JSON.parse(lines[0]), {
      time: "2026-01-02T03:04:05.678Z",
      level: "info",
      message: "hello",
      a: 1,
      b: "two",
      c: true,
    });
    assert.deepEqual(JSON.parse(lines[1]), {
      time: "2026-01-02T03:04:05.678Z",
      level: "warn",
      message: "careful",
    });
    const error = JSON.parse(lines[2]);
    assert.equal(error.level, "error");
    assert.equal(error.message, "broken");
    assert.equal(error.error, "line one\nline two");
  });
});

/** Asserts that no line contains any of the secrets (nor, for long ones, their first 7 characters). */
function assertNoSecrets(lines: string[], secrets: Record<string, string>): void {
  for (const [name, secret] of Object.entries(secrets)) {
    assert.ok(secret, `${name} was captured`);
    for (const line of lines) {
      assert.ok(!line.includes(secret), `${name} in log line: ${line}`);
      if (secret.length > 12) {
        assert.ok(!line.includes(secret.slice(0, 7)), `more than 6 characters of ${name}: ${line}`);
      }
    }
  }
}

/** The GitLab tokens the fake GitLab hands out over the sign-in and one GitLab refresh below. */
const GITLAB_TOKENS = {
  gitlabAccess0: "gl-access-0",
  gitlabRefresh0: "gl-refresh-0",
  gitlabAccess1: "gl-access-1",
  gitlabRefresh1: "gl-refresh-1",
};

Deno.test("no log line carries a secret", async (t) => {
  const lines: string[] = [];
  let app: TestApp | undefined;
  try {
    app = await makeTestApp({ logger: createLogger((line) => lines.push(line)) });
    const a = app;
    const secrets: Record<string, string> = { jwtSecret: TEST_SECRET };

    await t.step("through a full flow: code exchange, refresh, GitLab refresh", async () => {
      secrets.flowState = await startFlow(a);
      a.upstream.approve();
      const completed = await (await poll(a, secrets.flowState)).json();
      assert.equal(completed.status, "complete");
      secrets.code = completed.code;

      const exchanged = await exchange(a, completed.code);
      assert.equal(exchanged.status, 200);
      const first = await exchanged.json();
      secrets.accessToken1 = first.access_token;
      secrets.refreshToken1 = first.refresh_token;

      const refreshed = await refresh(a, first.refresh_token);
      assert.equal(refreshed.status, 200);
      const second = await refreshed.json();
      secrets.accessToken2 = second.access_token;
      secrets.refreshToken2 = second.refresh_token;

      // The GitLab token is now expiring: this refresh spends gl-refresh-0 upstream.
      a.clock.advance(7200_000 - UPSTREAM_REFRESH_BUFFER_MS + 1000);
      const upstreamRefreshed = await refresh(a, second.refresh_token);
      assert.equal(upstreamRefreshed.status, 200);
      const third = await upstreamRefreshed.json();
      secrets.accessToken3 = third.access_token;
      secrets.refreshToken3 = third.refresh_token;
      assert.equal(a.upstream.calls.refresh, 1);

      assert.ok(lines.length >= 5, "the requests were logged");
      for (const line of lines) JSON.parse(line);
      assertNoSecrets(lines, { ...secrets, ...GITLAB_TOKENS });
    });

    await t.step(
      "through failures: replayed code and refresh token, failed GitLab refresh",
      async () => {
        const replayedCode = await exchange(a, secrets.code);
        assert.equal(replayedCode.status, 400);
        await replayedCode.body?.cancel();
        const replayedRefresh = await refresh(a, secrets.refreshToken1);
        assert.equal(replayedRefresh.status, 400);
        await replayedRefresh.body?.cancel();

        a.clock.advance(7200_000);
        a.upstream.refreshes.push(
          new UpstreamError("terminal", "invalid_grant", "refresh refused"),
        );
        const failed = await refresh(a, secrets.refreshToken3);
        assert.equal(failed.status, 400);
        await failed.body?.cancel();
        assert.ok(
          lines.some((line) => JSON.parse(line).level === "warn"),
          "the failure was logged",
        );
        assert.deepEqual(a.upstream.refreshTokensSeen, ["gl-refresh-0", "gl-refresh-1"]);

        assertNoSecrets(lines, { ...secrets, ...GITLAB_TOKENS });
      },
    );
  } finally {
    app?.close();
  }
});

Deno.test("createLogger on stdout: lines gathered in one turn are written once they pass 1 MiB", async () => {
  // 20,000 lines of about 130 bytes in one turn, then an exit before the turn ends: what was
  // gathered past the limit has been written, what came after it is lost with the exit.
  const script = `
    import { createLogger } from ${
    JSON.stringify(new URL("../src/logger.ts", import.meta.url).href)
  };
    const logger = createLogger();
    for (let i = 0; i < 20000; i++) logger.info("mcp", { i, pad: "x".repeat(64) });
    Deno.exit(0);
  `;
  const { stdout } = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--quiet", script],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  const written = new TextDecoder().decode(stdout).split("\n").filter((line) => line !== "");
  assert.ok(written.length >= 20000 - 9000, `${written.length} lines written before the exit`);
  assert.deepEqual(JSON.parse(written.at(-1)!).i, written.length - 1, "in order, whole lines");
});

Deno.test("createLogger on stdout: request lines are gathered, a warning or an error writes them at once", async () => {
  const script = `
    import { createLogger } from ${
    JSON.stringify(new URL("../src/logger.ts", import.meta.url).href)
  };
    const logger = createLogger();
    for (let i = 0; i < 3; i++) logger.info("request", { i });
    if (Deno.args[0] === "exit") {
      logger.error("exiting");
      Deno.exit(1);
    }
  `;
  for (const mode of ["exit", "finish"]) {
    const { stdout } = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "--quiet", script, mode],
      stdout: "piped",
      stderr: "inherit",
    }).output();
    const lines = new TextDecoder().decode(stdout).trimEnd().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((line) => line.i ?? line.message),
      mode === "exit" ? [0, 1, 2, "exiting"] : [0, 1, 2],
      `${mode}: every line, in order, none lost`,
    );
  }
});
