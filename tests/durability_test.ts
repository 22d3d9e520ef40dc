/**
 * An answered refresh is durable: a service killed with SIGKILL right after its last answer,
 * then restarted on the same KV file, accepts every refresh token it last handed out and refuses
 * every one it rotated away. The group commit must answer a write only after the commit that
 * holds it, however many refreshes share that commit.
 */

import assert from "node:assert/strict";
import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";
import { TEST_SECRET } from "./_helpers.ts";
import { refreshOverHttp, type ServiceProcess, signInOverHttp, spawnService } from "./_service.ts";
import { KV_FILE, STORE_KINDS, type StoreKind } from "./_stores.ts";

/** Sessions refreshed side by side, so that their rotations share group commits. */
const SESSIONS = 20;
/** Refreshes per session: 300 in all. */
const ROUNDS = 15;

/** One session's refresh tokens: the one last answered, and every one rotated away before it. */
interface Chain {
  current: string;
  superseded: string[];
}

for (const kind of STORE_KINDS) {
  Deno.test({
    name: "durability: SIGKILL right after the last answered refresh loses no rotation" +
      (kind === KV_FILE ? "" : ` (${kind.name})`),
    ignore: kind.ignore,
    fn: () => killedUnderRefreshLoad(kind),
  });
}

async function killedUnderRefreshLoad(kind: StoreKind): Promise<void> {
  const gitlab = startSimulatedGitLab();
  const store = await kind.create();
  const env = {
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "durability-app",
    JWT_SECRET: TEST_SECRET,
    ...store.env,
  };
  const running: ServiceProcess[] = [];
  try {
    const first = await spawnService(env);
    running.push(first);
    const chains = await signInChains(first.url, gitlab);
    await Promise.all(chains.map((chain) => refreshRepeatedly(first.url, chain)));
    const killed = await first.stop("SIGKILL");
    running.pop();
    assert.notEqual(killed, 0, "the service was killed, not stopped gracefully");

    const second = await spawnService(env);
    running.push(second);
    await assertRefused(second.url, chains.flatMap((chain) => chain.superseded));
    await assertAccepted(second.url, chains.map((chain) => chain.current));
  } finally {
    for (const service of running) await service.stop();
    await gitlab.close();
    await store.dispose();
  }
}

async function signInChains(
  serviceUrl: string,
  gitlab: ReturnType<typeof startSimulatedGitLab>,
): Promise<Chain[]> {
  const chains: Chain[] = [];
  for (let i = 0; i < SESSIONS; i++) {
    // One at a time: each sign-in approves the newest user code at GitLab.
    // deno-lint-ignore no-await-in-loop
    const tokens = await signInOverHttp(serviceUrl, gitlab, { clientId: `client-${i}` });
    chains.push({ current: tokens.refresh_token, superseded: [] });
  }
  return chains;
}

async function refreshRepeatedly(serviceUrl: string, chain: Chain): Promise<void> {
  for (let round = 0; round < ROUNDS; round++) {
    // Each refresh needs the token the previous one answered.
    // deno-lint-ignore no-await-in-loop
    const { status, body } = await refreshOverHttp(serviceUrl, chain.current);
    assert.equal(status, 200, JSON.stringify(body));
    chain.superseded.push(chain.current);
    chain.current = body.refresh_token;
  }
}

async function assertRefused(serviceUrl: string, tokens: string[]): Promise<void> {
  const results = await Promise.all(tokens.map((token) => refreshOverHttp(serviceUrl, token)));
  const accepted = results.filter(({ status }) => status !== 400).length;
  assert.equal(accepted, 0, `${accepted} of ${tokens.length} superseded tokens were not refused`);
  for (const { body } of results) assert.equal(body.error, "invalid_grant");
}

async function assertAccepted(serviceUrl: string, tokens: string[]): Promise<void> {
  const results = await Promise.all(tokens.map((token) => refreshOverHttp(serviceUrl, token)));
  const lost = results.filter(({ status }) => status !== 200);
  assert.equal(
    lost.length,
    0,
    `${lost.length} of ${tokens.length} last answered tokens were lost: ${
      JSON.stringify(lost[0]?.body)
    }`,
  );
}
