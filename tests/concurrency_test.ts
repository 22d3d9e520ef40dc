/**
 * Races through the real app handler: single-use codes, rotating refresh tokens, one upstream
 * refresh per session and one completion per device flow, however many requests arrive at once.
 * Every race runs several rounds so that a lucky interleaving cannot pass it.
 */

import assert from "node:assert/strict";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import { sha256Base64Url } from "../src/crypto.ts";
import type { SessionRecord } from "../src/store/records.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import type { UpstreamTokens, UpstreamUser } from "../src/upstream/types.ts";
import { recordsOf } from "../src/store/keys.ts";
import {
  assertOneComplete,
  assertOneWinner,
  countRecords,
  exchange,
  gitlabTokensOf,
  issueCode,
  issueTokens,
  poll,
  refresh,
  startFlow,
  type TestApp,
  withApp,
} from "./_helpers.ts";

const ROUNDS = 5;
const PARALLEL = 20;

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

/** The KV holds one session, and the refresh token it accepts is the winner's. */
async function assertOneSessionHolding(app: TestApp, refreshToken: string): Promise<void> {
  const sessions = await recordsOf<SessionRecord>(app.kv, "session");
  assert.equal(sessions.length, 1);
  assert.equal(sessions[0].value.mcpRefreshTokenHash, sha256Base64Url(refreshToken));
}

Deno.test("concurrency: one authorization code, 20 parallel exchanges", async (t) => {
  for (let round = 1; round <= ROUNDS; round++) {
    await t.step(`round ${round}: exactly one 200 and 19 × 400 invalid_grant`, async () => {
      await withApp(async (app) => {
        const code = await issueCode(app);
        const results = await settle(
          await Promise.all(Array.from({ length: PARALLEL }, () => exchange(app, code))),
        );
        const winner = assertOneWinner(results).body;
        assert.equal(await countRecords(app.kv, "code"), 0);
        await assertOneSessionHolding(app, winner.refresh_token!);
        // The winner's refresh token is the one that works.
        assert.equal((await refresh(app, winner.refresh_token!)).status, 200);
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
            Array.from({ length: PARALLEL }, () => refresh(app, issued.refresh_token)),
          ),
        );
        const winner = assertOneWinner(results).body;
        assert.equal(app.upstream.calls.refresh, 0, "the GitLab token was not expiring");
        await assertOneSessionHolding(app, winner.refresh_token!);
        assert.equal((await refresh(app, issued.refresh_token)).status, 400);
        assert.equal((await refresh(app, winner.refresh_token!)).status, 200);
      });
    });
  }
});

Deno.test("concurrency: 20 parallel refreshes of an expiring GitLab token", async (t) => {
  for (let round = 1; round <= ROUNDS; round++) {
    await t.step(`round ${round}: exactly one 200 and one GitLab refresh`, async () => {
      await withApp(async (app) => {
        const issued = await issueTokens(app);
        const before = (await findSessionByRefreshToken(app.store, issued.refresh_token))!;
        // Within the 5-minute buffer of the GitLab token's expiry.
        app.clock.current = before.value.upstreamTokenExpiry - UPSTREAM_REFRESH_BUFFER_MS + 60_000;
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
            Array.from({ length: PARALLEL }, () => refresh(app, issued.refresh_token)),
          ),
        );
        const winner = assertOneWinner(results).body;
        assert.equal(app.upstream.calls.refresh, 1);
        assert.deepEqual(app.upstream.refreshTokensSeen, ["gl-refresh-0"]);

        const session = (await findSessionByRefreshToken(app.store, winner.refresh_token!))!;
        assert.deepEqual(await gitlabTokensOf(app.store, session), {
          accessToken: "gl-access-new",
          refreshToken: "gl-refresh-new",
        });
        assert.equal(session.value.upstreamTokenExpiry, app.clock.now() + 7200_000);
        assert.equal(await countRecords(app.kv, "lease"), 0, "the refresh lease was released");
      });
    });
  }
});

/** Makes FakeUpstream's user lookup take ~20 ms so that parallel polls overlap. */
function slowUser(app: TestApp): void {
  app.upstream.user = async (): Promise<UpstreamUser> => {
    await delay(20);
    return { id: "4242", username: "ada" };
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
    const complete = assertOneComplete(results);
    assert.equal(await countRecords(app.kv, "session"), 1);
    assert.equal(await countRecords(app.kv, "code"), 1);
    assert.equal(await countRecords(app.kv, "flow"), 0);
    assert.equal(app.upstream.calls.user, 1);

    // The one code works; the flow is done.
    const exchanged = await exchange(app, complete.body.code!);
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
