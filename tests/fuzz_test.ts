/**
 * Property test: thousands of generated requests per endpoint through the in-process app, with
 * valid sign-ins interleaved so the stateful paths run too. Every answer is one the spec (or
 * the README's additions) allows — a well-formed JSON error, a poll body of spec §2.4, a token
 * response, the device page — with a status from a short list; never a 500, never a throw.
 * Afterwards KV must be consistent and keyed by no secret.
 *
 * Reproducible: the seed is printed; `FUZZ_SEED=<n>` replays a run, `FUZZ_COUNT=<n>` changes
 * the number of requests per endpoint.
 */

import assert from "node:assert/strict";
import { findSessionByRefreshToken } from "../src/session/life.ts";
import { MAX_QUERY_PARAMETER_LENGTH } from "../src/http/params.ts";
import type { Logger } from "../src/logger.ts";
import { sessionIdOf } from "../src/store/session_tokens.ts";
import { kindOfKey, recordsOf, sessionKey } from "../src/store/keys.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  authorize,
  authorizeQuery,
  exchange,
  flowDataFromPage,
  issueCode,
  issueTokens,
  makeTestApp,
  PKCE,
  poll,
  register,
  TEST_BASE,
  TEST_REDIRECT as REDIRECT,
  type TestApp,
  tokenJson,
} from "./_helpers.ts";
import {
  asciiString,
  type Endpoint,
  ENDPOINTS,
  Gen,
  generate,
  newSeen,
  remember,
  type Seen,
} from "./_fuzz.ts";

const SEED = Number(Deno.env.get("FUZZ_SEED") ?? Math.floor(Math.random() * 2 ** 32));
const PER_ENDPOINT = Number(Deno.env.get("FUZZ_COUNT") ?? 5000);

const ALLOWED_STATUSES = new Set([200, 201, 204, 400, 404, 405, 413, 429]);
const CORS_PATHS =
  /^\/(token|register|revoke|\.well-known\/oauth-(authorization-server|protected-resource)(\/.*)?)$/;

// --- checking answers ---------------------------------------------------------------------

function isErrorBody(body: unknown): boolean {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return false;
  const keys = Object.keys(body).sort();
  const { error, error_description } = body as Record<string, unknown>;
  return keys.join() === "error,error_description" && typeof error === "string" &&
    error !== "" && typeof error_description === "string" && error_description !== "";
}

function isPollBody(status: number, body: unknown): boolean {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return false;
  const b = body as Record<string, unknown>;
  const keys = Object.keys(b).sort().join();
  if (status === 200 && b.status === "pending") return keys === "status";
  if (status === 200 && b.status === "complete") {
    return typeof b.code === "string" && b.code !== "" &&
      Object.keys(b).every((key) => ["status", "code", "redirect_uri", "state"].includes(key)) &&
      (b.redirect_uri === undefined || typeof b.redirect_uri === "string") &&
      (b.state === undefined || (typeof b.state === "string" && b.state !== ""));
  }
  if (b.status === "failed" || b.status === "expired") {
    return keys === "error,status" && typeof b.error === "string" && b.error !== "" &&
      (status === 400 || (status === 200 && b.status === "failed"));
  }
  return false;
}

function isTokenBody(body: unknown): boolean {
  if (typeof body !== "object" || body === null) return false;
  const b = body as Record<string, unknown>;
  return Object.keys(b).sort().join() ===
      "access_token,expires_in,refresh_token,scope,token_type" &&
    typeof b.access_token === "string" && b.access_token.split(".").length === 3 &&
    b.token_type === "Bearer" && typeof b.expires_in === "number" &&
    typeof b.refresh_token === "string" && b.refresh_token !== "" &&
    b.scope === "mcp:tools mcp:resources";
}

/** Checks one answer; records secrets it hands out. Throws with `what` on a violation. */
async function check(
  request: Request,
  response: Response,
  what: string,
  seen: Seen,
): Promise<number> {
  const fail = (problem: string, detail = ""): never => {
    throw new Error(`seed ${SEED}: ${problem}\n  request: ${what}\n  ${detail.slice(0, 500)}`);
  };
  const status = response.status;
  if (!ALLOWED_STATUSES.has(status)) fail(`status ${status}`, await response.text());
  if (response.headers.get("x-content-type-options") !== "nosniff") fail("no nosniff header");
  const pathname = new URL(request.url).pathname;
  const text = await response.text();
  const type = response.headers.get("content-type") ?? "";

  if (status === 204) {
    if (request.method !== "OPTIONS" || !CORS_PATHS.test(pathname)) fail("unexpected 204");
    if (text !== "") fail("204 with a body", text);
    return status;
  }
  if (pathname === "/authorize" && status === 200) {
    if (!type.startsWith("text/html")) fail("authorize 200 is not HTML", type);
    remember(seen, "flowStates", flowDataFromPage(text).flowState);
    return status;
  }
  if (pathname === "/" && status === 200) {
    // The service's home page (README: what this service is), HTML.
    if (!type.startsWith("text/html")) fail("home page is not HTML", type);
    return status;
  }
  if (pathname === "/revoke" && status === 200) {
    if (text !== "") fail("revoke 200 with a body", text);
    return status;
  }
  if (!type.startsWith("application/json")) fail(`status ${status} not JSON (${type})`, text);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    fail("body is not JSON", text);
  }
  if (status === 405 && !response.headers.get("allow")) fail("405 without Allow");
  if (status === 429 && !/^\d+$/.test(response.headers.get("retry-after") ?? "")) {
    fail("429 without Retry-After");
  }
  if (status === 413 && request.method === "GET") fail("413 for a GET");

  if (pathname === "/oauth/poll" && request.method === "GET" && status !== 429) {
    if (!isPollBody(status, body)) fail("not a poll body", text);
    const b = body as Record<string, string>;
    if (b.status === "complete") remember(seen, "codes", b.code);
    return status;
  }
  if (status === 200 && pathname === "/token") {
    if (!isTokenBody(body)) fail("not a token response", text);
    const b = body as Record<string, string>;
    remember(seen, "refreshTokens", b.refresh_token);
    remember(seen, "accessTokens", b.access_token);
    return status;
  }
  if (status === 201) {
    if (pathname !== "/register") fail("201 outside /register");
    const b = body as Record<string, unknown>;
    if (typeof b.client_id !== "string" || !Array.isArray(b.redirect_uris)) {
      fail("not a registration response", text);
    }
    remember(seen, "clientIds", b.client_id as string);
    return status;
  }
  if (status === 200) {
    if (!pathname.startsWith("/.well-known/")) fail(`200 JSON at ${pathname}`, text);
    const b = body as Record<string, unknown>;
    if (typeof b.issuer !== "string" && typeof b.resource !== "string") {
      fail("not a metadata document", text);
    }
    return status;
  }
  if (!isErrorBody(body)) fail(`status ${status} without an {error, error_description} body`, text);
  if (pathname === "/oauth/poll" && status !== 405 && status !== 429) fail("poll error", text);
  return status;
}

// --- valid flows, interleaved -----------------------------------------------------------------

async function send(t: TestApp, request: Request, seen: Seen): Promise<Record<string, string>> {
  const response = await t.app(request);
  const text = await response.clone().text();
  await check(request, response, `${request.method} ${request.url} (valid flow)`, seen);
  return text === "" ? {} : JSON.parse(text.startsWith("<") ? "{}" : text);
}

function tokenRequest(g: Gen, form: Record<string, string>): Request {
  const json = g.chance(0.5);
  return new Request(`${TEST_BASE}/token`, {
    method: "POST",
    headers: {
      "Content-Type": json ? "application/json" : "application/x-www-form-urlencoded",
    },
    body: json ? JSON.stringify(form) : new URLSearchParams(form).toString(),
  });
}

/** authorize → (GitLab hiccups) → approve → poll → token → refresh, checked strictly. */
async function validFlow(g: Gen, t: TestApp, seen: Seen, full = false): Promise<void> {
  const page = await authorize(t, { redirect_uri: REDIRECT, state: asciiString(g, 8) });
  assert.equal(page.status, 200, `seed ${SEED}: valid authorize`);
  const flowState = flowDataFromPage(await page.text()).flowState;
  remember(seen, "flowStates", flowState);
  const pollRequest = () =>
    new Request(`${TEST_BASE}/oauth/poll?flow_state=${encodeURIComponent(flowState)}`);

  // Sometimes GitLab is not ready, slow, or flaky first.
  const hiccup = g.int(5);
  if (hiccup === 1) t.upstream.polls.push({ kind: "pending" });
  if (hiccup === 2) t.upstream.polls.push(new UpstreamError("transient", "http_502", "HTTP 502"));
  if (hiccup === 3) t.upstream.polls.push({ kind: "slow_down" });
  if (hiccup === 4) {
    t.upstream.user = new UpstreamError("transient", "timeout", "timed out");
  }
  if (hiccup !== 0) {
    if (hiccup === 4) t.upstream.approve();
    assert.equal((await send(t, pollRequest(), seen)).status, "pending", `seed ${SEED}`);
    t.upstream.user = { id: 4242, username: "ada" };
    // GitLab's interval (grown by 5 s after slow_down) before it is asked again.
    t.clock.advance(hiccup === 3 ? 10_000 : 5_000);
  }
  if (hiccup !== 4) t.upstream.approve();
  const done = await send(t, pollRequest(), seen);
  assert.equal(done.status, "complete", `seed ${SEED}: valid poll ${JSON.stringify(done)}`);
  // Sometimes the code is left for the generated requests to redeem.
  if (!full && g.chance(0.25)) return;

  const exchanged = await send(
    t,
    tokenRequest(g, {
      grant_type: "authorization_code",
      code: done.code,
      code_verifier: PKCE.verifier,
      redirect_uri: REDIRECT,
    }),
    seen,
  );
  assert.ok(exchanged.refresh_token, `seed ${SEED}: valid exchange ${JSON.stringify(exchanged)}`);
  const refreshed = await send(
    t,
    tokenRequest(g, { grant_type: "refresh_token", refresh_token: exchanged.refresh_token }),
    seen,
  );
  assert.ok(refreshed.refresh_token, `seed ${SEED}: valid refresh ${JSON.stringify(refreshed)}`);
}

// --- the run ------------------------------------------------------------------------------

const PUBLIC_IPS = ["203.0.113.1", "203.0.113.2", "2001:db8::7"];

function info(ip: string): Deno.ServeHandlerInfo {
  return {
    remoteAddr: { transport: "tcp", hostname: ip, port: 40000 },
  } as unknown as Deno.ServeHandlerInfo;
}

/** The ASCII windows of `text` of each length in `lengths` that are in `secrets`. */
function containedSecrets(text: string, secrets: Set<string>, lengths: Set<number>): string[] {
  const found: string[] = [];
  for (const length of lengths) {
    for (let i = 0; i + length <= text.length; i++) {
      const window = text.slice(i, i + length);
      if (secrets.has(window)) found.push(window);
    }
  }
  return found;
}

/** One fuzz run over a fresh app configured with `env`. */
async function fuzz(env: Record<string, string>, perEndpoint: number, seed: number): Promise<void> {
  const proxied = env.TRUST_PROXY === "true";
  // deno-lint-ignore no-console -- the seed is what makes a failure reproducible.
  console.log(`fuzz seed ${seed} (replay with FUZZ_SEED=${SEED}), ${perEndpoint} per endpoint`);
  const errors: string[] = [];
  const logger: Logger = {
    info() {},
    warn() {},
    error: (message, fields) => errors.push(`${message} ${JSON.stringify(fields)}`),
  };
  const t = await makeTestApp({ logger, env });
  const g = new Gen(seed);
  const seen = newSeen();
  const counts = Object.fromEntries(ENDPOINTS.map((e) => [e, 0])) as Record<Endpoint, number>;
  const statuses = new Map<string, number>();
  const started = performance.now();
  try {
    for (let round = 0; round < perEndpoint; round++) {
      if (round % 50 === 0) await validFlow(g, t, seen);
      if (round % 400 === 399) t.clock.advance(g.chance(0.2) ? 301_000 : 61_000);
      // Usually one at a time; sometimes a burst in parallel.
      const order = [...ENDPOINTS].sort(() => g.random() - 0.5);
      const burst = g.chance(0.1);
      const runs = order.map((endpoint) => async () => {
        const { request, what } = generate(g, endpoint, seen, proxied);
        const peer = g.chance(proxied ? 0.5 : 0.15)
          ? info(g.pick(proxied ? [...PUBLIC_IPS, "127.0.0.1", "10.1.2.3"] : PUBLIC_IPS))
          : undefined;
        let response: Response;
        try {
          response = await t.app(request, peer);
        } catch (error) {
          throw new Error(`seed ${seed}: the app threw ${error}\n  request: ${what}`);
        }
        const logged = errors.length;
        const status = await check(request, response, what, seen).catch((error) => {
          throw new Error(`${error.message}\n  logged: ${errors.slice(logged - 1).join("; ")}`);
        });
        counts[endpoint]++;
        const label = `${endpoint} ${status}`;
        statuses.set(label, (statuses.get(label) ?? 0) + 1);
      });
      if (burst) await Promise.all(runs.map((run) => run()));
      else for (const run of runs) await run();
    }
    await validFlow(g, t, seen, true);

    // deno-lint-ignore no-console -- a summary of what the run covered.
    console.log(
      `${Math.round(performance.now() - started)} ms; answers:`,
      Object.fromEntries([...statuses].sort()),
    );
    for (const endpoint of ENDPOINTS) assert.ok(counts[endpoint] >= perEndpoint, endpoint);
    assert.deepEqual(errors, [], `seed ${seed}: error-level log lines`);
    // The stateful paths ran: some generated requests succeeded, not only the valid flows.
    for (const label of ["authorize 200", "poll 200", "token 200", "register 201"]) {
      assert.ok((statuses.get(label) ?? 0) > 0, `seed ${seed}: no ${label} among the fuzz`);
    }

    await checkKvInvariants(t, seen.secrets);
  } finally {
    t.close();
  }
}

Deno.test("fuzz: generated requests on every endpoint get only the answers the spec allows", () =>
  fuzz({}, PER_ENDPOINT, SEED));

Deno.test("fuzz: the same behind a trusted proxy, X-Forwarded-For generated too", () =>
  fuzz({ TRUST_PROXY: "true" }, Math.ceil(PER_ENDPOINT / 5), SEED + 1));

async function checkKvInvariants(t: TestApp, secrets: Set<string>): Promise<void> {
  const entries = await recordsOf<Record<string, unknown>>(t.kv);
  const sessions = new Map<string, Record<string, unknown>>();
  for (const entry of entries) {
    if (kindOfKey(entry.key) === "session") sessions.set(String(entry.key[1]), entry.value);
  }
  for (const entry of entries) {
    const kind = kindOfKey(entry.key);
    const id = entry.key[1];
    assert.ok(kind, `seed ${SEED}: unexpected key ${String(entry.key[0])}`);
    if (kind === "session") {
      assert.equal(typeof entry.value.upstreamUserId, "string", `seed ${SEED}: session user id`);
      assert.equal(typeof entry.value.upstreamUsername, "string");
      assert.notEqual(entry.value.upstreamUsername, "", `seed ${SEED}: session username`);
      const opened = await t.store.getSession(String(id));
      assert.ok(opened, `seed ${SEED}: session ${String(id)} does not open`);
      const gitlab = await t.store.openUpstreamTokens(opened.value);
      assert.ok(gitlab?.accessToken, "the GitLab token is in the session");
    }
    if (kind === "code") {
      const sessionId = entry.value.sessionId as string;
      if ((entry.value.expiresAt as number) >= t.clock.now()) {
        assert.ok(sessions.has(sessionId), `seed ${SEED}: live code without its session`);
      }
    }
  }
  assert.equal(
    entries.filter((e) => kindOfKey(e.key) === "lease").length,
    0,
    "no lease left behind",
  );

  // No key holds a code, refresh token, access token or flow state we were handed.
  const lengths = new Set([...secrets].map((secret) => secret.length));
  const keyText = entries.map((entry) => entry.key.map(String).join("\u0001")).join("\u0002");
  assert.deepEqual(containedSecrets(keyText, secrets, lengths), [], `seed ${SEED}`);

  // Every refresh token still accepted belongs to a live session with a user, one per session.
  const accepted = new Map<string, number>();
  for (const secret of secrets) {
    if (!sessionIdOf(secret)) continue;
    const session = await findSessionByRefreshToken(t.store, secret);
    if (!session) continue;
    assert.ok(sessions.has(session.value.id), `seed ${SEED}: token of a missing session`);
    accepted.set(session.value.id, (accepted.get(session.value.id) ?? 0) + 1);
  }
  assert.ok(accepted.size > 0, "the fuzz left some refresh token valid, so this check ran");
  for (const [id, count] of accepted) {
    assert.equal(count, 1, `seed ${SEED}: session ${id} accepts ${count} refresh tokens`);
  }
}

Deno.test("fuzz: revocations racing refreshes and code exchanges: a revoked session never comes back", async () => {
  const t = await makeTestApp();
  try {
    const form = (fields: Record<string, string>) =>
      new Request(`${TEST_BASE}${fields.token ? "/revoke" : "/token"}`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams(fields),
      });
    for (let round = 0; round < 40; round++) {
      const tokens = await issueTokens(t);
      const code = round % 2 === 0 ? await issueCode(t) : undefined;
      const responses = await Promise.all([
        t.app(form({ grant_type: "refresh_token", refresh_token: tokens.refresh_token })),
        t.app(form({ token: tokens.refresh_token })),
        t.app(form({ token: tokens.access_token })),
        t.app(form({ grant_type: "refresh_token", refresh_token: tokens.refresh_token })),
        ...(code
          ? [t.app(form({
            grant_type: "authorization_code",
            code,
            code_verifier: PKCE.verifier,
            redirect_uri: REDIRECT,
          }))]
          : []),
      ]);
      for (const response of responses) {
        assert.ok(response.status === 200 || response.status === 400, String(response.status));
        await response.body?.cancel();
      }
      // The access token's revocation deletes its session whichever request commits first.
      const sessionId = sessionIdOf(tokens.refresh_token)!;
      assert.equal((await t.kv.get(sessionKey(sessionId))).versionstamp, null, `round ${round}`);
    }
  } finally {
    t.close();
  }
});

Deno.test("fuzz regressions: oversized /authorize parameters → 400, the longest accepted ones work end to end", async () => {
  const t = await makeTestApp();
  try {
    const authorizeWith = (overrides: Record<string, string>) =>
      authorize(t, { redirect_uri: REDIRECT, state: "s", ...overrides });
    // Once answered 500 (KV: "Value too large", "Key too large for read").
    for (const name of ["state", "client_id", "redirect_uri", "code_challenge", "scope"]) {
      const response = await authorizeWith({ [name]: "é".repeat(70_000) });
      assert.equal(response.status, 400, name);
      const body = await response.json();
      assert.equal(body.error, "invalid_request");
      assert.match(body.error_description, new RegExp(name));
    }
    assert.equal(t.upstream.calls.start, 0);
    // Under the parameter limit but over KV's key limit: an unknown client, not a 500.
    const longClient = await authorizeWith({ client_id: "x".repeat(3000) });
    assert.equal(longClient.status, 200);
    await longClient.body?.cancel();

    // At the limit, in two-byte characters, the stored parameters at once: a whole sign-in
    // works.
    const long = (char: string) => char.repeat(MAX_QUERY_PARAMETER_LENGTH);
    const longChallenge = await authorizeWith({ code_challenge: long("c"), state: long("ß") });
    assert.equal(longChallenge.status, 200);
    await longChallenge.body?.cancel();
    const redirect = `http://127.0.0.1:9999/cb?${long("r").slice(26)}`;
    const page = await authorizeWith({
      client_id: long("é"),
      state: long("ß"),
      redirect_uri: redirect,
    });
    assert.equal(page.status, 200);
    const { flowState } = flowDataFromPage(await page.text());
    t.upstream.approve();
    const done = await (await poll(t, flowState)).json();
    assert.equal(done.status, "complete");
    assert.equal(done.state, long("ß"));
    assert.equal(done.redirect_uri, redirect);
    const exchanged = await exchange(t, done.code, { redirect_uri: redirect });
    const tokens = await exchanged.json();
    assert.equal(exchanged.status, 200, JSON.stringify(tokens));
    const refreshed = await tokenJson(t, {
      grant_type: "refresh_token",
      refresh_token: tokens.refresh_token,
    });
    assert.equal(refreshed.status, 200);
    await refreshed.body?.cancel();
  } finally {
    t.close();
  }
});

Deno.test("fuzz regressions: REDIRECT_URI_POLICY=registered with a client_id of kilobytes → 400/401, not 500", async () => {
  const t = await makeTestApp({ env: { REDIRECT_URI_POLICY: "registered" } });
  try {
    const query = authorizeQuery({ client_id: "y".repeat(3000), redirect_uri: null, state: null });
    const authorize = await t.app(new Request(`${TEST_BASE}/authorize?${query}`));
    assert.equal(authorize.status, 400);
    assert.equal((await authorize.json()).error, "invalid_request");
    // A registered client's code, presented with a client_id of kilobytes.
    const registered = await register(t, { redirect_uris: [REDIRECT] });
    assert.equal(registered.status, 201);
    const { client_id: clientId } = await registered.json();
    const code = await issueCode(t, { client_id: clientId });
    const token = await tokenJson(t, {
      grant_type: "authorization_code",
      code,
      code_verifier: PKCE.verifier,
      redirect_uri: REDIRECT,
      client_id: "z".repeat(20_000),
    });
    // An unknown client at /token is 401 (RFC 6749 §5.2), which makes MCP clients register again.
    assert.equal(token.status, 401);
    assert.equal((await token.json()).error, "invalid_client");
  } finally {
    t.close();
  }
});
