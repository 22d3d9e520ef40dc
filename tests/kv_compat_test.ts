/**
 * Records written by an earlier version still load (issue 34 §5): a Deno KV file written by the
 * service at commit 4520dfd, before the restructuring (tests/fixtures/README.md says how it was
 * made), read with today's code: its registered client is known, its session's user is read,
 * its current refresh token rotates, and the one rotated away before is still refused.
 */

import assert from "node:assert/strict";
import { FakeClock, makeTestApp, refresh, type TestApp } from "./_helpers.ts";

const FIXTURE = new URL("./fixtures/kv_4520dfd", import.meta.url).pathname;

interface Written {
  clockMs: number;
  clientId: string;
  rotatedAwayRefreshToken: string;
  refreshToken: string;
  accessToken: string;
  user: { id: number; username: string };
}

/** A JWT's claims (base64url, unpadded). */
function claimsOf(jwt: string): Record<string, unknown> {
  const payload = jwt.split(".")[1].replaceAll("-", "+").replaceAll("_", "/");
  return JSON.parse(atob(payload.padEnd(Math.ceil(payload.length / 4) * 4, "=")));
}

async function withFixture(fn: (t: TestApp, written: Written) => Promise<void>): Promise<void> {
  const written: Written = JSON.parse(await Deno.readTextFile(`${FIXTURE}.json`));
  const dir = await Deno.makeTempDir();
  try {
    // A copy: the test writes to it, the fixture stays as 4520dfd wrote it.
    const kvPath = `${dir}/kv.sqlite3`;
    await Deno.copyFile(`${FIXTURE}.sqlite3`, kvPath);
    const t = await makeTestApp({ kvPath, clock: new FakeClock(written.clockMs + 60_000) });
    try {
      await fn(t, written);
    } finally {
      t.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("KV written by 4520dfd: the client, the session and its user load", () =>
  withFixture(async (t, written) => {
    const client = await t.store.getClient(written.clientId);
    assert.equal(client?.clientName, "Written by 4520dfd");
    const sid = String(claimsOf(written.accessToken).sid);
    const session = await t.store.getSession(sid);
    assert.ok(session, "the session is read");
    assert.equal(session.value.upstreamUserId, String(written.user.id));
    assert.equal(session.value.upstreamUsername, written.user.username);
  }));

Deno.test("KV written by 4520dfd: its refresh token rotates, the one rotated away is refused", () =>
  withFixture(async (t, written) => {
    const refused = await refresh(t, written.rotatedAwayRefreshToken);
    assert.equal(refused.status, 400);
    assert.equal((await refused.json()).error, "invalid_grant");
    const rotated = await refresh(t, written.refreshToken);
    assert.equal(rotated.status, 200, await rotated.clone().text());
    const body = await rotated.json();
    assert.notEqual(body.refresh_token, written.refreshToken);
    const claims = claimsOf(body.access_token);
    assert.equal(claims.sub, String(written.user.id));
    assert.equal(claims.gitlab_user, written.user.username);
  }));

Deno.test("KV written by 4520dfd: its numeric user id is read as text, and stays text once saved", () =>
  withFixture(async (t, written) => {
    const sid = String(claimsOf(written.accessToken).sid);
    const raw = await t.kv.get<{ upstreamUserId: unknown }>(["session", sid]);
    assert.equal(typeof raw.value?.upstreamUserId, "number", "4520dfd wrote a number");
    const session = await t.store.getSession(sid);
    assert.equal(session?.value.upstreamUserId, String(written.user.id));
    assert.ok(session && await t.store.saveSession(session, { ...session.value, updatedAt: 1 }));
    const saved = await t.kv.get<{ upstreamUserId: unknown }>(["session", sid]);
    assert.equal(saved.value?.upstreamUserId, String(written.user.id));
  }));
