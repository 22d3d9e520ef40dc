/**
 * Races through the real app handler: single-use codes, rotating refresh tokens, one upstream
 * refresh per session and one completion per device flow, however many requests arrive at once.
 * Every race runs several rounds so that a lucky interleaving cannot pass it.
 */

import assert from "node:assert/strict";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/sessions.ts";
import type { UpstreamTokens, UpstreamUser } from "../src/upstream/types.ts";
import {
  issueCode,
  issueTokens,
  PKCE,
  poll,
  startFlow,
  type TestApp,
  token,
  withApp,
} from "./_helpers.ts";

const ROUNDS = 5;
const PARALLEL = 20;
const REDIRECT = "http://127.0.0.1:9999/callback";

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The fields of token, error and poll bodies these races look at. */
interface Body {
  access_token?: string;
  refresh_token?: string;
  error?: string;
  status?: string;
  code?: string;
}

interface Result {
  status: number;
  body: Body;
}

/** Status and parsed JSON body of each response. */
async function settle(responses: Response[]): Promise<Result[]> {
  return await Promise.all(
    responses.map(async (response) => ({ status: response.status, body: await response.json() })),
  );
}

async function count(kv: Deno.Kv, prefix: string): Promise<number> {
  return (await Array.fromAsync(kv.list({ prefix: [prefix] }))).length;
}

/** Runs `fn` over a fresh test app, closed afterwards. */

function refreshWith(app: TestApp, refreshToken: string): Promise<Response> {
  return token(app, { grant_type: "refresh_token", refresh_token: refreshToken });
}

/** Exactly one 200; every other answer a 400 invalid_grant. Returns the winner's body. */
function assertOneWinner(results: Result[]): Body {
  const winners = results.filter((result) => result.status === 200);
  assert.equal(winners.length, 1, `200s: ${winners.length}`);
  const losers = results.filter((result) => result.status !== 200);
  assert.equal(losers.length, results.length - 1);
  for (const loser of losers) {
    assert.equal(loser.status, 400);
    assert.equal(loser.body.error, "invalid_grant");
  }
  return winners[0].body;
}

Deno.test("concurrency: one authorization code, 20 parallel exchanges", async (t) => {
  for (let round = 1; round <= ROUNDS; round++) {
    await t.step(`round ${round}: exactly one 200 and 19 × 400 invalid_grant`, async () => {
      await withApp(async (app) => {
        const code = await issueCode(app);
        const results = await settle(
          await Promise.all(
            Array.from({ length: PARALLEL }, () =>
              token(app, {
                grant_type: "authorization_code",
                code,
                code_verifier: PKCE.verifier,
                redirect_uri: REDIRECT,
              })),
          ),
        );
        const winner = assertOneWinner(results);
        assert.equal(await count(app.kv, "code"), 0);
        assert.equal(await count(app.kv, "refresh"), 1);
        // The winner's refresh token is the one that works.
        assert.equal((await refreshWith(app, winner.refresh_token!)).status, 200);
      });
    });
  }
});

Deno.test("concurrency: one refresh token, 20 parallel refreshes", async (t) => {
  for (let round = 1; round <= ROUNDS; round++) {
    await t.step(`round ${round}: exactly one 200`, async () => {
      await withApp(async (app) => {
        const issued = await issueTokens(app);
        const results = await settle(
          await Promise.all(
            Array.from({ length: PARALLEL }, () => refreshWith(app, issued.refresh_token)),
          ),
        );
        const winner = assertOneWinner(results);
        assert.equal(app.upstream.calls.refresh, 0, "the GitLab token was not expiring");
        assert.equal(await count(app.kv, "refresh"), 1);
        assert.equal((await refreshWith(app, issued.refresh_token)).status, 400);
        assert.equal((await refreshWith(app, winner.refresh_token!)).status, 200);
      });
    });
  }
});

Deno.test("concurrency: 20 parallel refreshes of an expiring GitLab token", async (t) => {
  for (let round = 1; round <= ROUNDS; round++) {
    await t.step(`round ${round}: exactly one 200 and one GitLab refresh`, async () => {
      await withApp(async (app) => {
        const issued = await issueTokens(app);
        const before = (await app.store.findSessionByRefreshToken(issued.refresh_token))!;
        // Within the 5-minute buffer of the GitLab token's expiry.
        app.clock.current = before.value.gitlabTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + 60_000;
        app.upstream.refreshes.push(async (): Promise<UpstreamTokens> => {
          await delay(20);
          return {
            accessToken: "gl-access-new",
            refreshToken: "gl-refresh-new",
            expiresInSeconds: 7200,
          };
        });

        const results = await settle(
          await Promise.all(
            Array.from({ length: PARALLEL }, () => refreshWith(app, issued.refresh_token)),
          ),
        );
        const winner = assertOneWinner(results);
        assert.equal(app.upstream.calls.refresh, 1);
        assert.deepEqual(app.upstream.refreshTokensSeen, ["gl-refresh-0"]);

        const session = (await app.store.findSessionByRefreshToken(winner.refresh_token!))!;
        assert.equal(session.value.gitlabAccessToken, "gl-access-new");
        assert.equal(session.value.gitlabRefreshToken, "gl-refresh-new");
        assert.equal(session.value.gitlabTokenExpiry, app.clock.now() + 7200_000);
        assert.equal(await count(app.kv, "lease"), 0, "the refresh lease was released");
      });
    });
  }
});

/** Makes FakeUpstream's user lookup take ~20 ms so that parallel polls overlap. */
function slowUser(app: TestApp): void {
  app.upstream.user = async (): Promise<UpstreamUser> => {
    await delay(20);
    return { id: 4242, username: "ada" };
  };
}

async function raceApprovedPolls(parallel: number): Promise<void> {
  await withApp(async (app) => {
    const flowState = await startFlow(app);
    app.upstream.approve();
    slowUser(app);

    const results = await settle(
      await Promise.all(Array.from({ length: parallel }, () => poll(app, flowState))),
    );
    const complete = results.filter((result) => result.body.status === "complete");
    assert.equal(complete.length, 1, JSON.stringify(results));
    assert.equal(complete[0].status, 200);
    for (const other of results.filter((result) => result.body.status !== "complete")) {
      const pending = other.status === 200 && other.body.status === "pending";
      const gone = other.status === 400 && other.body.status === "expired" &&
        other.body.error === "Flow not found";
      assert.ok(pending || gone, JSON.stringify(other));
    }
    assert.equal(await count(app.kv, "session"), 1);
    assert.equal(await count(app.kv, "code"), 1);
    assert.equal(await count(app.kv, "flow"), 0);
    assert.equal(app.upstream.calls.user, 1);

    // The one code works; the flow is done.
    const exchanged = await token(app, {
      grant_type: "authorization_code",
      code: complete[0].body.code!,
      code_verifier: PKCE.verifier,
      redirect_uri: REDIRECT,
    });
    assert.equal(exchanged.status, 200);
    await exchanged.body?.cancel();
    const after = await poll(app, flowState);
    assert.equal(after.status, 400);
    assert.deepEqual(await after.json(), { status: "expired", error: "Flow not found" });
  });
}

Deno.test("concurrency: parallel polls of one approved flow", async (t) => {
  for (const parallel of [2, 10]) {
    for (let round = 1; round <= ROUNDS; round++) {
      await t.step(`${parallel} polls, round ${round}: exactly one complete`, async () => {
        await raceApprovedPolls(parallel);
      });
    }
  }
});
