/**
 * The gateway's memory of accepted tokens never outlives what the full check would decide:
 * one second at most, nor past the token's expiry, the session's end, or the moment its GitLab
 * token must be refreshed; another issuer, or an ended session, is checked anew.
 */

import assert from "node:assert/strict";
import type { AccessTokenClaims } from "../src/jwt.ts";
import { UPSTREAM_REFRESH_BUFFER_MS } from "../src/session/upstream_refresh.ts";
import {
  createVerifiedTokens,
  VERIFIED_TOKEN_TTL_MS,
  type VerifiedToken,
} from "../src/gateway/verified_tokens.ts";
import type { SessionRecord } from "../src/store/records.ts";

const NOW = Date.parse("2026-01-01T00:00:00Z");
const ISSUER = "https://auth.example.com";
const HOUR = 3_600_000;

function found(
  overrides: { expiresAtMs?: number; session?: Partial<SessionRecord>; sid?: string } = {},
): VerifiedToken {
  const sid = overrides.sid ?? "session-1";
  const claims: AccessTokenClaims = {
    iss: ISSUER,
    sub: "42",
    aud: "client",
    sid,
    scope: "mcp:tools mcp:resources",
    gitlab_user: "alice",
  };
  const session: SessionRecord = {
    id: sid,
    mcpRefreshTokenHash: "",
    mcpTokenExpiry: NOW + HOUR,
    sealedUpstreamTokens: "sealed",
    upstreamTokenExpiry: NOW + 2 * HOUR,
    upstreamUserId: "42",
    upstreamUsername: "alice",
    clientId: "client",
    scopes: ["mcp:tools", "mcp:resources"],
    createdAt: NOW,
    updatedAt: NOW,
    expiresAt: NOW + 30 * 24 * HOUR,
    ...overrides.session,
  };
  return { claims, expiresAtMs: overrides.expiresAtMs ?? NOW + HOUR, session, upstreamToken: "gl" };
}

/** The last moment `entry` is still given back, when remembered at NOW. */
function lastMomentRemembered(entry: VerifiedToken): number | undefined {
  const tokens = createVerifiedTokens();
  tokens.remember("token", entry, NOW);
  if (!tokens.get("token", ISSUER, NOW)) return undefined;
  let at = NOW;
  while (tokens.get("token", ISSUER, at + 1)) at++;
  return at - NOW;
}

Deno.test("verified tokens: remembered for less than one second", () => {
  assert.equal(lastMomentRemembered(found()), VERIFIED_TOKEN_TTL_MS - 1);
});

Deno.test("verified tokens: never past the token's expiry, the session's end or a due GitLab refresh", () => {
  assert.equal(lastMomentRemembered(found({ expiresAtMs: NOW + 300 })), 299);
  assert.equal(lastMomentRemembered(found({ session: { expiresAt: NOW + 200 } })), 199);
  const refreshDue = NOW + 100;
  const upstreamTokenExpiry = refreshDue + UPSTREAM_REFRESH_BUFFER_MS;
  assert.equal(lastMomentRemembered(found({ session: { upstreamTokenExpiry } })), 99);
  assert.equal(lastMomentRemembered(found({ expiresAtMs: NOW })), undefined);
});

Deno.test("verified tokens: another issuer is not served from memory", () => {
  const tokens = createVerifiedTokens();
  tokens.remember("token", found(), NOW);
  assert.ok(tokens.get("token", ISSUER, NOW));
  assert.equal(tokens.get("token", "https://other.example.com", NOW), undefined);
});

Deno.test("verified tokens: an ended session is forgotten at once, other sessions stay", () => {
  const tokens = createVerifiedTokens();
  tokens.remember("a", found({ sid: "one" }), NOW);
  tokens.remember("b", found({ sid: "two" }), NOW);
  tokens.forgetSession("one");
  assert.equal(tokens.get("a", ISSUER, NOW), undefined);
  assert.ok(tokens.get("b", ISSUER, NOW));
});

Deno.test("verified tokens: a TTL of 0 remembers nothing", () => {
  const tokens = createVerifiedTokens(0);
  tokens.remember("token", found(), NOW);
  assert.equal(tokens.get("token", ISSUER, NOW), undefined);
});

Deno.test("verified tokens: an MCP session's owner is remembered less than a second, forgotten with its session", () => {
  const tokens = createVerifiedTokens();
  tokens.rememberMcpSession("mcp-a", "one", NOW);
  tokens.rememberMcpSession("mcp-b", "two", NOW);
  assert.equal(tokens.mcpSessionOwner("mcp-a", NOW + VERIFIED_TOKEN_TTL_MS - 1), "one");
  assert.equal(tokens.mcpSessionOwner("mcp-a", NOW + VERIFIED_TOKEN_TTL_MS), undefined);
  tokens.rememberMcpSession("mcp-a", "one", NOW);
  tokens.forgetSession("one");
  assert.equal(tokens.mcpSessionOwner("mcp-a", NOW), undefined);
  assert.equal(tokens.mcpSessionOwner("mcp-b", NOW), "two");
  tokens.forgetMcpSession("mcp-b");
  assert.equal(tokens.mcpSessionOwner("mcp-b", NOW), undefined);
});

Deno.test("verified tokens: a remembered token keeps what a call needs of its session, not the sealed GitLab tokens", () => {
  const tokens = createVerifiedTokens();
  tokens.remember("token", found({ session: { access: ACCESS } }), NOW);
  const session = tokens.get("token", ISSUER, NOW)?.session;
  assert.deepEqual(session, {
    id: "session-1",
    upstreamUserId: "42",
    upstreamUsername: "alice",
    clientId: "client",
    access: ACCESS,
    expiresAt: NOW + 30 * 24 * HOUR,
    upstreamTokenExpiry: NOW + 2 * HOUR,
  });
});

Deno.test("verified tokens: tokens never sent again are dropped once expired, not held until the memory is full", () => {
  const tokens = createVerifiedTokens();
  for (let i = 0; i < 100; i++) tokens.remember(`token-${i}`, found({ sid: `s-${i}` }), NOW);
  tokens.remember("late", found(), NOW + VERIFIED_TOKEN_TTL_MS - 1);
  assert.equal(tokens.size(), 101);
  tokens.remember("later", found(), NOW + VERIFIED_TOKEN_TTL_MS);
  assert.equal(tokens.size(), 2);
  assert.ok(tokens.get("late", ISSUER, NOW + VERIFIED_TOKEN_TTL_MS));
});

const ACCESS = {
  checkedAt: NOW,
  groupLevels: { "acme/platform": 30 },
  admittingGroups: ["acme/platform"],
  listedUser: false,
};
