/**
 * Test wiring: the real app over an in-memory KV, a clock the test moves, and an in-process
 * fake GitLab whose answers each test scripts.
 */

import { FakeGitLabIdTokens } from "./_gitlab_id_tokens.ts";
import assert from "node:assert/strict";
import { gitLabProfile } from "../src/upstream/gitlab.ts";
import { createAppDeps } from "../src/app/deps.ts";
import { createApp, type FetchHandler } from "../src/app/app.ts";
import type { Clock } from "../src/clock.ts";
import { type Config, loadConfig } from "../src/app/config.ts";
import { ClientMetadataError } from "../src/client_metadata/document.ts";
import type { ClientMetadataFetcher } from "../src/client_metadata/fetcher.ts";
import type { AppDeps } from "../src/app/context.ts";
import { type Logger, silentLogger } from "../src/logger.ts";
import type { SessionRecord, UpstreamTokenPair } from "../src/store/records.ts";
import type { Store, StoreDatabase } from "../src/store/mod.ts";
import { loadTemplates, type Templates } from "../src/pages/mod.ts";
import { type RecordKind, recordsOf } from "../src/store/keys.ts";
import {
  type AuthorizationCodeGrant,
  type AuthorizationRedirect,
  type DeviceAuthorization,
  type DevicePollResult,
  type Upstream,
  UpstreamError,
  type UpstreamProfile,
  type UpstreamTokens,
  type UpstreamUser,
} from "../src/upstream/types.ts";

export const TEST_SECRET = "test-secret-that-is-at-least-32-bytes-long!";
export const TEST_BASE = "http://auth.test";
/** The client's redirect URI in `authorizeQuery` and the code exchanges below. */
export const TEST_REDIRECT = "http://127.0.0.1:9999/callback";

/** A clock that only moves when the test says so. */
/** The GitLab tokens a session holds, opened (they are sealed in the record). */
export async function gitlabTokensOf(
  store: Store,
  session: { value: SessionRecord } | null,
): Promise<UpstreamTokenPair | null> {
  assert.ok(session, "the session exists");
  return await store.openUpstreamTokens(session.value);
}

export class FakeClock implements Clock {
  constructor(public current = Date.parse("2026-01-01T00:00:00Z")) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
}

type Scripted<T> = T | UpstreamError | (() => Promise<T>);

/** A user as the fake GitLab's API answers: its id a number, as GitLab's is. */
export interface FakeUser {
  id: number | string;
  username: string;
}

/** An in-process GitLab whose next answers the test queues. */
export class FakeUpstream implements Upstream {
  profile: UpstreamProfile = gitLabProfile(new URL("https://gitlab.test"), "api");
  calls = { start: 0, poll: 0, refresh: 0, user: 0, revoke: 0, exchange: 0 };
  revokedTokens: string[] = [];
  /** The RS256 key its CI ID tokens are signed with, published at /oauth/discovery/keys. */
  idTokens = new FakeGitLabIdTokens();
  device: DeviceAuthorization = {
    deviceCode: "device-code-1",
    userCode: "WDJB-MJHT",
    verificationUri: "https://gitlab.test/oauth/device",
    verificationUriComplete: "https://gitlab.test/oauth/device?user_code=WDJB-MJHT",
    expiresInSeconds: 300,
    intervalSeconds: 5,
  };
  startResult?: UpstreamError;
  /** Answers of successive device polls; when empty, `pending`. */
  polls: Scripted<DevicePollResult>[] = [];
  /** GitLab's user, id as its API gives it (a number); the provider hands it on as text. */
  user: Scripted<FakeUser> = { id: 4242, username: "ada" };
  /** Answers of successive refreshes; when empty, a fresh pair. */
  refreshes: Scripted<UpstreamTokens>[] = [];
  refreshTokensSeen: string[] = [];
  /** Answers of successive authorization code exchanges; when empty, a fresh pair. */
  exchanges: Scripted<UpstreamTokens>[] = [];
  exchangesSeen: AuthorizationCodeGrant[] = [];
  /** The scopes each sign-in asked for (a redirect's authorization URL, a device flow's start). */
  scopesAsked: string[] = [];

  authorizationUrl(redirect: AuthorizationRedirect): URL {
    const scope = redirect.scopes ?? this.profile.scopes;
    this.scopesAsked.push(scope);
    const url = new URL("https://gitlab.test/oauth/authorize");
    url.search = new URLSearchParams({
      client_id: "gitlab-app-id",
      redirect_uri: redirect.redirectUri,
      response_type: "code",
      scope,
      state: redirect.state,
      code_challenge: redirect.codeChallenge,
      code_challenge_method: "S256",
    }).toString();
    return url;
  }
  exchangeAuthorizationCode(grant: AuthorizationCodeGrant): Promise<UpstreamTokens> {
    this.calls.exchange++;
    this.exchangesSeen.push(grant);
    return resolve(
      this.exchanges.shift() ??
        { accessToken: "gl-access-x", refreshToken: "gl-refresh-x", expiresInSeconds: 7200 },
    );
  }

  startDeviceAuthorization(scopes = this.profile.scopes): Promise<DeviceAuthorization> {
    this.calls.start++;
    this.scopesAsked.push(scopes);
    return this.startResult ? Promise.reject(this.startResult) : Promise.resolve(this.device);
  }
  pollDeviceToken(): Promise<DevicePollResult> {
    this.calls.poll++;
    return resolve(this.polls.shift() ?? { kind: "pending" });
  }
  refreshTokens(refreshToken: string): Promise<UpstreamTokens> {
    this.calls.refresh++;
    this.refreshTokensSeen.push(refreshToken);
    const n = this.calls.refresh;
    return resolve(
      this.refreshes.shift() ??
        { accessToken: `gl-access-${n}`, refreshToken: `gl-refresh-${n}`, expiresInSeconds: 7200 },
    );
  }
  async fetchUser(): Promise<UpstreamUser> {
    this.calls.user++;
    const user = await resolve(this.user);
    return { ...user, id: String(user.id) };
  }
  revokeToken(token: string): Promise<void> {
    this.calls.revoke++;
    this.revokedTokens.push(token);
    return Promise.resolve();
  }
  /**
   * The signed-in user's access level per group full path, as GitLab's members/all answers it
   * (memberships through parent groups included); absent: not a member.
   */
  groupLevels: Record<string, number> = {};
  /** When set, every membership question fails with it (GitLab down, rate limiting). */
  membershipFailure?: UpstreamError;
  /** Each membership question, with the user id as GitLab's API path carries it (a number). */
  membershipsSeen: { accessToken: string; groupPath: string; userId: number }[] = [];
  membership(accessToken: string, groupPath: string, userId: string): Promise<number | null> {
    this.membershipsSeen.push({ accessToken, groupPath, userId: Number(userId) });
    if (this.membershipFailure) return Promise.reject(this.membershipFailure);
    return Promise.resolve(this.groupLevels[groupPath] ?? null);
  }
  /** Makes the next device poll return a token. */
  approve(tokens: Partial<UpstreamTokens> = {}): void {
    this.polls.push({
      kind: "token",
      tokens: {
        accessToken: "gl-access-0",
        refreshToken: "gl-refresh-0",
        expiresInSeconds: 7200,
        ...tokens,
      },
    });
  }
}

function resolve<T>(scripted: Scripted<T>): Promise<T> {
  if (scripted instanceof UpstreamError) return Promise.reject(scripted);
  if (typeof scripted === "function") return (scripted as () => Promise<T>)();
  return Promise.resolve(scripted);
}

/** Everything a test needs to drive the app; `kv` is another backend when one was given. */
export interface TestApp<D extends StoreDatabase = Deno.Kv> {
  app: FetchHandler;
  kv: D;
  store: Store;
  clock: FakeClock;
  upstream: FakeUpstream;
  config: Config;
  deps: AppDeps;
  close(): void;
}

let templates: Templates | undefined;

const OFFLINE_METADATA_FETCHER: ClientMetadataFetcher = {
  fetchDocument: () =>
    Promise.reject(new ClientMetadataError("this test app fetches no metadata documents")),
};

/**
 * The app as makeTestApp builds it, over `database` (another backend, PostgreSQL in the store
 * contract tests), which the caller opened and closes.
 */
export async function makeTestAppOn<D extends StoreDatabase>(
  database: D,
  options: Omit<NonNullable<Parameters<typeof makeTestApp>[0]>, "kvPath"> = {},
): Promise<TestApp<D>> {
  // Configured exactly as makeTestApp configures; only the database differs.
  const base = await makeTestApp(options);
  base.close();
  const deps = createAppDeps(base.config, {
    kv: database,
    clock: base.clock,
    logger: options.logger ?? silentLogger,
    templates: base.deps.templates,
    upstream: base.upstream,
    clientMetadataFetcher: options.clientMetadataFetcher ?? OFFLINE_METADATA_FETCHER,
    gitlabFetch: base.upstream.idTokens.serve,
  });
  return {
    ...base,
    app: createApp(deps),
    kv: database,
    store: deps.store,
    deps,
    close: () => {
      deps.servers.close();
    },
  };
}

/**
 * The real app over `:memory:` KV (or the KV file `kvPath`, to stand for one of several
 * processes sharing it, with the `clock` and `upstream` they share); `env` as the environment
 * would give it.
 */
export async function makeTestApp(
  options: {
    env?: Record<string, string>;
    logger?: Logger;
    configured?: boolean;
    clientMetadataFetcher?: ClientMetadataFetcher;
    kvPath?: string;
    clock?: FakeClock;
    upstream?: FakeUpstream;
  } = {},
): Promise<TestApp> {
  const env = {
    GITLAB_CLIENT_ID: "gitlab-app-id",
    JWT_SECRET: TEST_SECRET,
    BASE_URL: TEST_BASE,
    ...options.env,
  };
  if (options.configured === false) {
    delete (env as Record<string, string>).GITLAB_CLIENT_ID;
    delete (env as Record<string, string>).JWT_SECRET;
  }
  const config = loadConfig(env);
  const kv = await Deno.openKv(options.kvPath ?? ":memory:");
  const clock = options.clock ?? new FakeClock();
  const upstream = options.upstream ?? fakeUpstreamAsConfigured(config);
  templates ??= await loadTemplates();
  const logger = options.logger ?? silentLogger;
  // Test traffic stays on loopback: documents only from a fetcher a test hands in.
  const clientMetadataFetcher = options.clientMetadataFetcher ?? OFFLINE_METADATA_FETCHER;
  const deps = createAppDeps(config, {
    kv,
    clock,
    logger,
    templates,
    upstream,
    clientMetadataFetcher,
    gitlabFetch: upstream.idTokens.serve,
  });
  const { store } = deps;
  return {
    app: createApp(deps),
    kv,
    store,
    clock,
    upstream,
    config,
    deps,
    close: () => {
      deps.servers.close();
      kv.close();
    },
  };
}

/** A FakeUpstream presenting itself with the configured URL and scopes, as the real one does. */
function fakeUpstreamAsConfigured(config: Config): FakeUpstream {
  const upstream = new FakeUpstream();
  upstream.profile = gitLabProfile(config.upstream.url, config.upstream.scopes);
  return upstream;
}

/** Runs `fn` with a fresh test app and closes it afterwards, whatever happens. */
export async function withApp(
  fn: (t: TestApp) => Promise<void>,
  options?: Parameters<typeof makeTestApp>[0],
): Promise<void> {
  const t = await makeTestApp(options);
  try {
    await fn(t);
  } finally {
    t.close();
  }
}

/** Runs `fn` with a fresh test app whose environment adds `env`, and closes it afterwards. */
export function withEnv(env: Record<string, string>, fn: (t: TestApp) => Promise<void>) {
  return withApp(fn, { env });
}

// deno-lint-ignore no-explicit-any -- a JSON body, read field by field by the assertions
export type Json = Record<string, any>;

/** A JSON answer's status, parsed body and headers (asserting it is JSON). */
export async function readJsonAnswer(
  response: Response,
): Promise<{ status: number; body: Json; headers: Headers }> {
  const text = await response.text();
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/, text);
  return { status: response.status, body: JSON.parse(text), headers: response.headers };
}

/** An error answer's body (spec §2.7). */
export interface OAuthErrorBody {
  error: string;
  error_description: string;
}

/**
 * Asserts a spec §2.7 JSON error: `status`, a JSON body of exactly `error` and
 * `error_description`, the `error` code when given, and the description when given (exact or a
 * pattern). Returns the body.
 */
export async function assertError(
  response: Response,
  status: number,
  error?: string,
  description?: string | RegExp,
): Promise<OAuthErrorBody> {
  const text = await response.text();
  assert.equal(response.status, status, text);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/, text);
  const body = JSON.parse(text);
  assert.deepEqual(Object.keys(body).sort(), ["error", "error_description"], text);
  assert.equal(typeof body.error, "string");
  assert.equal(typeof body.error_description, "string");
  if (error !== undefined) assert.equal(body.error, error);
  if (typeof description === "string") assert.equal(body.error_description, description);
  else if (description) assert.match(body.error_description, description);
  return body;
}

/**
 * Every KV entry, keys and values, as one text to search for secrets in (bytes spelled out as
 * UTF-8, base64 and hex; bigints and u64s as digits).
 */
export async function kvText(kv: StoreDatabase): Promise<string> {
  const entries = await recordsOf(kv);
  return JSON.stringify(
    entries.map(({ key, value, versionstamp }) => ({ key, value, versionstamp })),
    (_name, value) => {
      if (value instanceof Uint8Array) {
        return {
          utf8: new TextDecoder().decode(value),
          base64: value.toBase64(),
          hex: value.toHex(),
        };
      }
      if (typeof value === "bigint") return value.toString();
      if (value instanceof Deno.KvU64) return value.value.toString();
      return value;
    },
  );
}

/** How many records of `kind` the KV holds. */
export async function countRecords(kv: StoreDatabase, kind: RecordKind): Promise<number> {
  return (await recordsOf(kv, kind)).length;
}

/** A PKCE pair (RFC 7636 Appendix B). */
export const PKCE = {
  verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
  challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
};

/** Query of a valid authorization request, with overrides (`null` drops a parameter). */
export function authorizeQuery(overrides: Record<string, string | null> = {}): string {
  const params: Record<string, string | null> = {
    response_type: "code",
    client_id: "client-1",
    code_challenge: PKCE.challenge,
    code_challenge_method: "S256",
    redirect_uri: TEST_REDIRECT,
    state: "xyz",
    ...overrides,
  };
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null) query.set(k, v);
  return query.toString();
}

/** The values the page hands its script (the #flow-data JSON block). */
export function flowDataFromPage(html: string): { flowState: string; [k: string]: unknown } {
  const match = html.match(/<script type="application\/json" id="flow-data"[^>]*>(.*?)<\/script>/s);
  if (!match) throw new Error("page has no flow-data block");
  return JSON.parse(match[1]);
}

/** Anything that answers requests the way the app does (a `TestApp`, or another wiring). */
export type AppLike = Pick<TestApp, "app">;

/**
 * GET /authorize with a valid request and `overrides` (`null` drops a parameter); as the
 * browser holding `jar` when given (its cookies sent, the ones it sets kept).
 */
export async function authorize(
  t: AppLike,
  overrides: Record<string, string | null> = {},
  { jar }: { jar?: CookieJar } = {},
): Promise<Response> {
  const url = `${TEST_BASE}/authorize?${authorizeQuery(overrides)}`;
  const response = await t.app(new Request(url, { headers: jar?.headers() }));
  jar?.store(response);
  return response;
}

/** GET /authorize with a valid request, asserting the page; returns its flow state. */
export async function startFlow(
  t: AppLike,
  overrides: Record<string, string | null> = {},
): Promise<string> {
  const response = await authorize(t, overrides);
  const html = await response.text();
  assert.equal(response.status, 200, html);
  return flowDataFromPage(html).flowState;
}

/** POST /register with `body` (JSON-encoded unless a string) and `headers`. */
export function register(
  t: AppLike,
  body: unknown,
  headers: Record<string, string> = { "Content-Type": "application/json" },
): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/register`, {
      method: "POST",
      headers,
      body: typeof body === "string" ? body : JSON.stringify(body),
    }),
  );
}

/** Registers a client for `redirectUris` (and `metadata`), asserting the 201; its client id. */
export async function registerClient(
  t: AppLike,
  redirectUris: string[],
  metadata: Record<string, unknown> = {},
): Promise<string> {
  const response = await register(t, { ...metadata, redirect_uris: redirectUris });
  const text = await response.text();
  assert.equal(response.status, 201, text);
  return JSON.parse(text).client_id;
}

/** GET /oauth/poll. */
export async function poll(t: AppLike, flowState: string): Promise<Response> {
  return await t.app(
    new Request(`${TEST_BASE}/oauth/poll?flow_state=${encodeURIComponent(flowState)}`),
  );
}

/** A device poll that takes `ms` (real time) to answer `result`: for concurrent polls. */
export function slowPoll(ms: number, result: DevicePollResult): () => Promise<DevicePollResult> {
  return async () => {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return result;
  };
}

/** GET /oauth/poll, asserting 200; the body. */
export async function pollOk(t: AppLike, flowState: string): Promise<Record<string, unknown>> {
  const response = await poll(t, flowState);
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body;
}

/** One poll that completes the flow, and the code it gives exchanged (both asserted). */
export async function pollCompletesAndExchanges(
  t: TestApp<StoreDatabase>,
  flowState: string,
): Promise<void> {
  const done = await pollOk(t, flowState);
  assert.equal(done.status, "complete", JSON.stringify(done));
  const exchanged = await exchange(t, done.code as string);
  assert.equal(exchanged.status, 200);
  await exchanged.body?.cancel();
}

/** Runs a flow to completion and returns the authorization code. */
export async function issueCode(
  t: TestApp<StoreDatabase>,
  overrides: Record<string, string | null> = {},
): Promise<string> {
  const flowState = await startFlow(t, overrides);
  t.upstream.approve();
  const body = await (await poll(t, flowState)).json();
  if (body.status !== "complete") throw new Error(`poll answered ${JSON.stringify(body)}`);
  return body.code;
}

/**
 * POST /token form-encoded; `init.url` posts elsewhere than `${TEST_BASE}/token` and
 * `init.headers` are sent along with the content type.
 */
export async function token(
  t: AppLike,
  form: Record<string, string>,
  init: { url?: string; headers?: Record<string, string> } = {},
): Promise<Response> {
  return await t.app(
    new Request(init.url ?? `${TEST_BASE}/token`, {
      method: "POST",
      headers: { ...init.headers, "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(form),
    }),
  );
}

/** POST /token with a JSON body. */
export function tokenJson(t: AppLike, body: unknown): Promise<Response> {
  return t.app(
    new Request(`${TEST_BASE}/token`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }),
  );
}

/** The authorization_code grant for `code` with the PKCE verifier and `TEST_REDIRECT`. */
export function exchange(
  t: AppLike,
  code: string,
  extra: Record<string, string> = {},
): Promise<Response> {
  return token(t, {
    grant_type: "authorization_code",
    code,
    code_verifier: PKCE.verifier,
    redirect_uri: TEST_REDIRECT,
    ...extra,
  });
}

/** The refresh_token grant. */
export function refresh(
  t: AppLike,
  refreshToken: string,
  extra: Record<string, string> = {},
): Promise<Response> {
  return token(t, { grant_type: "refresh_token", refresh_token: refreshToken, ...extra });
}

/** Exchanges a fresh code and returns the token response body. */
export async function issueTokens(
  t: TestApp<StoreDatabase>,
): Promise<{ access_token: string; refresh_token: string; [k: string]: unknown }> {
  const code = await issueCode(t);
  const response = await exchange(t, code);
  if (response.status !== 200) {
    throw new Error(`token answered ${response.status} ${await response.text()}`);
  }
  return await response.json();
}

// ---- races -----------------------------------------------------------------------------------

/** A status and a parsed JSON body, as the race assertions read them. */
interface RaceResult {
  status: number;
  body: { status?: unknown; error?: unknown };
}

/** No answer is a 500 (or any 5xx). */
export function assertNo500(results: RaceResult[]): void {
  for (const result of results) {
    assert.ok(result.status < 500, `a ${result.status}: ${JSON.stringify(result.body)}`);
  }
}

/** Exactly one 200; every other answer a 400 invalid_grant, none a 500. Returns the winner. */
export function assertOneWinner<R extends RaceResult>(results: R[]): R {
  assertNo500(results);
  const winners = results.filter((result) => result.status === 200);
  assert.equal(winners.length, 1, `200s: ${winners.length} ${JSON.stringify(results)}`);
  const losers = results.filter((result) => result.status !== 200);
  assert.equal(losers.length, results.length - 1);
  for (const loser of losers) {
    assert.equal(loser.status, 400, JSON.stringify(loser.body));
    assert.equal(loser.body.error, "invalid_grant", JSON.stringify(loser.body));
  }
  return winners[0];
}

/**
 * Parallel polls of one approved flow: exactly one answers 200 complete, every other one is
 * still pending or finds the flow gone. Returns the complete one.
 */
export function assertOneComplete<R extends RaceResult>(results: R[]): R {
  const complete = results.filter((result) => result.body.status === "complete");
  assert.equal(complete.length, 1, JSON.stringify(results));
  assert.equal(complete[0].status, 200);
  for (const other of results.filter((result) => result.body.status !== "complete")) {
    const pending = other.status === 200 && other.body.status === "pending";
    const gone = other.status === 400 && other.body.status === "expired" &&
      other.body.error === "Flow not found";
    assert.ok(pending || gone, JSON.stringify(other));
  }
  return complete[0];
}

// ---- browsers without a browser --------------------------------------------------------------

/** The cookies one browser holds for the service: what `Set-Cookie` set, sent back as `Cookie`. */
export class CookieJar {
  readonly cookies = new Map<string, string>();

  /** Keeps the cookies a response sets. */
  store(response: Response): void {
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(";");
      const at = pair.indexOf("=");
      this.cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
    }
  }

  /** The `Cookie` header to send, or `{}` without cookies. */
  headers(): Record<string, string> {
    if (this.cookies.size === 0) return {};
    return { Cookie: [...this.cookies].map(([name, value]) => `${name}=${value}`).join("; ") };
  }
}

/**
 * A redirect sign-in (GITLAB_SIGN_IN=redirect) of the /authorize request `overrides` describe:
 * through the consent page to GitLab and back to our callback with GitLab's code; the callback's
 * answer.
 */
export async function redirectSignIn(
  t: AppLike,
  overrides: Record<string, string | null> = {},
): Promise<Response> {
  const jar = new CookieJar();
  const page = await authorize(t, overrides, { jar });
  const form = consentFormOf(await page.text());
  const consent = await t.app(
    new Request(`${TEST_BASE}/oauth/consent`, {
      method: "POST",
      headers: { ...jar.headers(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ ...form, action: "continue" }),
    }),
  );
  jar.store(consent);
  assert.equal(consent.status, 302);
  const state = new URL(consent.headers.get("location")!).searchParams.get("state")!;
  return await t.app(
    new Request(`${TEST_BASE}/oauth/callback?${new URLSearchParams({ code: "gl-code", state })}`, {
      headers: jar.headers(),
    }),
  );
}

/** The hidden fields of the redirect sign-in's consent page (its form's fields). */
export function consentFormOf(html: string): { sign_in: string; csrf_token: string } {
  const field = (name: string) => {
    const match = html.match(new RegExp(`name="${name}" value="([^"]*)"`));
    if (!match) throw new Error(`consent page has no ${name} field`);
    return match[1];
  };
  return { sign_in: field("sign_in"), csrf_token: field("csrf_token") };
}
