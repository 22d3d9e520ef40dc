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
import type { Logger } from "../src/logger.ts";
import { sessionIdOf } from "../src/session_tokens.ts";
import { kindOfKey, recordsOf, sessionKey } from "../src/store/keys.ts";
import { UpstreamError } from "../src/upstream/types.ts";
import {
  authorizeQuery,
  exchange,
  flowDataFromPage,
  issueCode,
  issueTokens,
  makeTestApp,
  PKCE,
  poll,
  TEST_BASE,
  type TestApp,
  tokenJson,
} from "./_helpers.ts";

const SEED = Number(Deno.env.get("FUZZ_SEED") ?? Math.floor(Math.random() * 2 ** 32));
const PER_ENDPOINT = Number(Deno.env.get("FUZZ_COUNT") ?? 5000);
const REDIRECT = "http://127.0.0.1:9999/callback";
const MAX_BODY = 64 * 1024;

const ENDPOINTS = [
  "authorize",
  "poll",
  "token",
  "register",
  "revoke",
  "metadata",
  "unknown",
] as const;
type Endpoint = typeof ENDPOINTS[number];

const ALLOWED_STATUSES = new Set([200, 201, 204, 400, 404, 405, 413, 429]);
const CORS_PATHS =
  /^\/(token|register|revoke|\.well-known\/oauth-(authorization-server|protected-resource)(\/.*)?)$/;

// --- seeded randomness ------------------------------------------------------------------------

/** sfc32, seeded through splitmix32: small, fast and good enough for test generation. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  const split = () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
  let a = split(), b = split(), c = split(), d = split();
  return () => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) >>> 0;
    return t / 4294967296;
  };
}

class Gen {
  readonly random: () => number;
  constructor(seed: number) {
    this.random = prng(seed);
  }
  int(maxExclusive: number): number {
    return Math.floor(this.random() * maxExclusive);
  }
  chance(p: number): boolean {
    return this.random() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }
  /** A length skewed towards small values, up to `max`. */
  length(max: number): number {
    const r = this.random();
    if (r < 0.6) return this.int(Math.min(max, 16) + 1);
    if (r < 0.9) return this.int(Math.min(max, 512) + 1);
    return this.int(max + 1);
  }
}

// --- value generators -----------------------------------------------------------------------

const ODD_CHARS = [
  "é",
  "漢",
  "😀",
  "\u0000",
  "\uFEFF",
  "\u202E",
  "\u2028",
  "\uD800",
  "\uDFFF",
  "\n",
  "\r\n",
  "\t",
  " ",
  "+",
  "&",
  "=",
  "%",
  "#",
  "?",
  "/",
  "\\",
  '"',
  "'",
  "<",
  ">",
  "{",
  "}",
  "[",
  "]",
  ";",
  ",",
];
const PERCENT_GARBAGE = [
  "%",
  "%0",
  "%zz",
  "%%41",
  "%ED%A0%80",
  "%ED%BF%BF",
  "%C3%28",
  "%FF",
  "%FE%FF",
  "%00",
  "%E2%82",
  "%F0%9F%98",
  "%25",
  "%2B",
  "%26",
  "%3D",
  "%C0%AF",
  "%uD800",
];
const ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~";

/** What the run has seen: secrets to reuse as valid-looking values, and to look for in KV. */
interface Seen {
  flowStates: string[];
  codes: string[];
  refreshTokens: string[];
  accessTokens: string[];
  clientIds: string[];
  /** Every flow state, code and token ever handed out. */
  secrets: Set<string>;
}

function newSeen(): Seen {
  return {
    flowStates: [],
    codes: [],
    refreshTokens: [],
    accessTokens: [],
    clientIds: [],
    secrets: new Set(),
  };
}

/** Keeps the recent values of a kind for reuse; secrets are kept for the final KV check. */
function remember(seen: Seen, kind: Exclude<keyof Seen, "secrets">, value: string): void {
  const list = seen[kind];
  list.push(value);
  if (list.length > 100) list.splice(0, list.length - 100);
  if (kind !== "clientIds") seen.secrets.add(value);
}

function asciiString(g: Gen, length: number): string {
  let text = "";
  for (let i = 0; i < length; i++) text += ALNUM[g.int(ALNUM.length)];
  return text;
}

/** A string of any sort: plain, odd characters, unicode, huge. */
function anyString(g: Gen, seen: Seen): string {
  switch (g.int(10)) {
    case 0:
      return "";
    case 1:
      return asciiString(g, g.length(64));
    case 2: {
      let text = "";
      const n = g.length(40);
      for (let i = 0; i < n; i++) text += g.chance(0.5) ? g.pick(ODD_CHARS) : ALNUM[g.int(62)];
      return text;
    }
    case 3:
      return g.chance(0.15) ? huge(g) : asciiString(g, 8).repeat(1 + g.int(500));
    case 4:
      return g.pick([
        ...seen.flowStates.slice(-5),
        ...seen.codes.slice(-5),
        ...seen.refreshTokens.slice(-5),
        "x",
      ]);
    case 5:
      return g.pick(["code", "S256", "plain", "authorization_code", "refresh_token", "token"]);
    case 6:
      return g.pick([PKCE.verifier, PKCE.challenge, REDIRECT, "https://evil.example/", "null"]);
    case 7:
      return String(g.pick([0, -1, 1e308, NaN, 2 ** 53, 3.14]));
    case 8:
      return "\u0000".repeat(g.length(8) + 1);
    default:
      return g.pick(ODD_CHARS).repeat(g.length(20) + 1);
  }
}

/** A long string, built cheaply: up to ~100 KiB. */
function huge(g: Gen): string {
  const chunk = asciiString(g, 1 + g.int(32)) + (g.chance(0.3) ? g.pick(ODD_CHARS) : "");
  const target = g.chance(0.5) ? MAX_BODY - 64 + g.int(128) : g.int(100 * 1024);
  return chunk.repeat(Math.max(1, Math.floor(target / chunk.length)));
}

/** Percent-encodes what can be encoded; lone surrogates are sent raw (the URL parser copes). */
function encode(g: Gen, text: string): string {
  if (text.length > 4096 || g.chance(0.1)) return text;
  try {
    return encodeURIComponent(text);
  } catch {
    return text;
  }
}

/** A raw `a=b&c=d` string with garbage, repeated keys and missing `=` mixed in. */
function rawParams(g: Gen, pairs: [string, string][]): string {
  const parts = pairs.map(([name, value]) => {
    const r = g.random();
    if (r < 0.05) return encode(g, name);
    if (r < 0.12) return `${encode(g, name)}=${g.pick(PERCENT_GARBAGE)}${encode(g, value)}`;
    if (r < 0.16) return `${g.pick(PERCENT_GARBAGE)}=${encode(g, value)}`;
    return `${encode(g, name)}=${encode(g, value)}`;
  });
  if (g.chance(0.05)) parts.push("");
  if (g.chance(0.05)) parts.push(g.pick(PERCENT_GARBAGE));
  return parts.join(g.chance(0.97) ? "&" : g.pick(["&&", ";", "&amp;"]));
}

const PARAMS_BY_ENDPOINT: Record<Endpoint, string[]> = {
  authorize: [
    "response_type",
    "client_id",
    "code_challenge",
    "code_challenge_method",
    "redirect_uri",
    "state",
    "scope",
    "resource",
  ],
  poll: ["flow_state"],
  token: [
    "grant_type",
    "code",
    "code_verifier",
    "redirect_uri",
    "refresh_token",
    "client_id",
    "scope",
  ],
  register: ["redirect_uris", "client_name", "grant_types", "token_endpoint_auth_method"],
  revoke: ["token", "token_type_hint", "client_id"],
  metadata: ["x"],
  unknown: ["x"],
};
const ODD_NAMES = ["__proto__", "constructor", "toString", "hasOwnProperty", "", "a[b]", "é"];

/** A plausible value for a named parameter, often valid, sometimes anything. */
function valueFor(g: Gen, name: string, seen: Seen): string {
  if (g.chance(0.25)) return anyString(g, seen);
  switch (name) {
    case "response_type":
      return "code";
    case "client_id":
      return g.chance(0.8) ? "client-1" : g.pick([...seen.clientIds.slice(-3), "c"]);
    case "code_challenge":
      return PKCE.challenge;
    case "code_challenge_method":
      return "S256";
    case "redirect_uri":
      return REDIRECT;
    case "state":
      return asciiString(g, g.int(20));
    case "flow_state":
      return g.pick([...seen.flowStates.slice(-20), "unknown-flow"]);
    case "grant_type":
      return g.pick(["authorization_code", "refresh_token"]);
    case "code":
      return g.chance(0.5) && seen.codes.length > 0
        ? seen.codes.at(-1)!
        : g.pick([...seen.codes.slice(-20), "unknown-code"]);
    case "code_verifier":
      return PKCE.verifier;
    case "refresh_token":
      return g.chance(0.5) && seen.refreshTokens.length > 0
        ? seen.refreshTokens.at(-1)!
        : g.pick([...seen.refreshTokens.slice(-20), "unknown-refresh"]);
    case "token":
      return g.pick([
        ...seen.refreshTokens.slice(-10),
        ...seen.accessTokens.slice(-10),
        "a.b.c",
        "unknown",
      ]);
    case "token_type_hint":
      return g.pick(["refresh_token", "access_token", "other"]);
    default:
      return anyString(g, seen);
  }
}

function paramPairs(g: Gen, endpoint: Endpoint, seen: Seen): [string, string][] {
  const names = PARAMS_BY_ENDPOINT[endpoint];
  const pairs: [string, string][] = [];
  for (const name of names) {
    if (g.chance(0.8)) pairs.push([name, valueFor(g, name, seen)]);
  }
  if (g.chance(0.1)) pairs.push([g.pick(names), valueFor(g, g.pick(names), seen)]); // repeated
  if (g.chance(0.1)) pairs.push([g.pick(ODD_NAMES), anyString(g, seen)]);
  if (g.chance(0.05)) pairs.push([anyString(g, seen).slice(0, 100), anyString(g, seen)]);
  // Shuffle.
  for (let i = pairs.length - 1; i > 0; i--) {
    const j = g.int(i + 1);
    [pairs[i], pairs[j]] = [pairs[j], pairs[i]];
  }
  return pairs;
}

/** Any JSON value, nested up to `depth`. */
function jsonValue(g: Gen, seen: Seen, depth: number): unknown {
  const r = g.int(depth > 0 ? 9 : 6);
  switch (r) {
    case 0:
      return null;
    case 1:
      return g.chance(0.5);
    case 2:
      return g.pick([0, -1, 1.5, 1e308, 2 ** 60]);
    case 3:
    case 4:
    case 5:
      return anyString(g, seen);
    case 6:
    case 7:
      return Array.from({ length: g.int(4) }, () => jsonValue(g, seen, depth - 1));
    default:
      return Object.fromEntries(
        Array.from({ length: g.int(4) }, () => [asciiString(g, 5), jsonValue(g, seen, depth - 1)]),
      );
  }
}

function jsonObject(g: Gen, endpoint: Endpoint, seen: Seen): Record<string, unknown> {
  const object: Record<string, unknown> = {};
  // defineProperty: a `__proto__` name becomes a key, not the prototype.
  const put = (name: string, value: unknown) =>
    Object.defineProperty(object, name, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  for (const [name, value] of paramPairs(g, endpoint, seen)) {
    put(name, g.chance(0.8) ? value : jsonValue(g, seen, 2));
  }
  if (endpoint === "register") {
    // Often a registration that is valid but for what the fuzz changed above.
    if (g.chance(0.5)) put("grant_types", ["authorization_code", "refresh_token"]);
    if (g.chance(0.5)) put("token_endpoint_auth_method", "none");
    if (g.chance(0.7)) {
      put(
        "redirect_uris",
        g.chance(0.8)
          ? [g.pick([REDIRECT, "https://app.example/cb", "com.example.app:/cb"])]
          : jsonValue(g, seen, 2),
      );
    }
  }
  return object;
}

const CONTENT_TYPES = [
  "application/x-www-form-urlencoded",
  "application/x-www-form-urlencoded; charset=UTF-8",
  "application/json",
  "application/json; charset=utf-8",
  "APPLICATION/JSON",
  " application/json ",
  "application/json;charset=utf-16",
  "application/jsonp",
  "text/plain",
  "text/html",
  "multipart/form-data; boundary=xyz",
  "application/x-www-form-urlencoded, application/json",
  "",
  ";;;",
  "é/ü",
];

/** A request body and its content type (undefined: no header). */
function body(
  g: Gen,
  endpoint: Endpoint,
  seen: Seen,
): { body: BodyInit | undefined; type: string | undefined } {
  const json = g.chance(0.5);
  const type = g.chance(0.8)
    ? (json ? g.pick(CONTENT_TYPES.slice(2, 6)) : g.pick(CONTENT_TYPES.slice(0, 2)))
    : g.chance(0.8)
    ? g.pick(CONTENT_TYPES)
    : undefined;
  const r = g.random();
  let content: BodyInit | undefined;
  if (r < 0.05) content = undefined;
  else if (r < 0.08) content = "";
  else if (r < 0.12) content = invalidUtf8(g);
  else if (r < 0.14) content = erroringStream(g);
  else if (r < 0.17) content = huge(g);
  else if (r < 0.20) content = "\u0000".repeat(g.length(64) + 1);
  else if (json) {
    const k = g.random();
    content = k < 0.7
      ? JSON.stringify(jsonObject(g, endpoint, seen))
      : k < 0.8
      ? JSON.stringify([jsonObject(g, endpoint, seen)])
      : k < 0.9
      ? JSON.stringify(jsonValue(g, seen, 3))
      : g.pick(["{", "[1,", '"open', "{'a':1}", "nul", "{}}", "\uFEFF{}"]);
  } else {
    content = rawParams(g, paramPairs(g, endpoint, seen));
  }
  return { body: content, type };
}

function invalidUtf8(g: Gen): Uint8Array<ArrayBuffer> {
  const prefix = new TextEncoder().encode("grant_type=refresh_token&refresh_token=");
  const bad = g.pick([[0xc3, 0x28], [0xff], [0xed, 0xa0, 0x80], [0xf0, 0x9f, 0x98], [0x80]]);
  const bytes = new Uint8Array(prefix.length + bad.length);
  bytes.set(prefix);
  bytes.set(bad, prefix.length);
  return bytes;
}

/** A body that fails halfway, as a client disconnecting would. */
function erroringStream(g: Gen): ReadableStream<Uint8Array> {
  const chunks = g.int(3);
  let sent = 0;
  return new ReadableStream({
    pull(controller) {
      if (sent++ < chunks) controller.enqueue(new TextEncoder().encode("grant_type=x&"));
      else controller.error(new Error("connection reset"));
    },
  });
}

const METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "PROPFIND", "get"];

const UNKNOWN_PATHS = [
  "/",
  "/authorize/",
  "/AUTHORIZE",
  "/oauth",
  "/oauth/poll/",
  "/oauth/poll/x",
  "/token/",
  "/tokens",
  "/.well-known",
  "/.well-known/",
  "/.well-known/openid-configuration",
  "/%2e%2e/token",
  "/token%00",
  "//token",
  "/register.json",
  "/revoke/x",
  "/favicon.ico",
  "/robots.txt",
  "/index.html",
  "/%F0%9F%98%80",
  "/%ED%A0%80",
  "/%zz",
];

function path(g: Gen, endpoint: Endpoint): string {
  switch (endpoint) {
    case "authorize":
      return "/authorize";
    case "poll":
      return "/oauth/poll";
    case "token":
      return "/token";
    case "register":
      return "/register";
    case "revoke":
      return "/revoke";
    case "metadata": {
      const base = g.pick([
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource",
      ]);
      return base + g.pick(["", "", "", "/", "/mcp", "/mcp/", "/x", "//", "/a/b", "/%00"]);
    }
    case "unknown":
      return g.chance(0.8) ? g.pick(UNKNOWN_PATHS) : `/zz-${encode(g, anyString(g, emptySeen))}`;
  }
}

const emptySeen = newSeen();

/** What a proxy chain (and a client lying at its start) puts in X-Forwarded-For. */
function forwardedFor(g: Gen): string {
  const entry = () =>
    g.pick([
      "203.0.113.7",
      "198.51.100.1:4711",
      "10.0.0.1",
      "127.0.0.1",
      "::1",
      "[2001:db8::1]:443",
      "2001:DB8::1",
      "fd00::1",
      "unknown",
      "garbage",
      "",
      " ",
      "999.999.999.999",
      "x".repeat(3000),
      "1.2.3.4".repeat(500),
      "::ffff:192.0.2.1",
    ]);
  return Array.from({ length: 1 + g.int(4) }, entry).join(g.pick([", ", ",", " , "]));
}

const GET_ENDPOINTS = new Set<Endpoint>(["authorize", "poll", "metadata", "unknown"]);

/** One generated request, and a short description for failure messages. */
function generate(
  g: Gen,
  endpoint: Endpoint,
  seen: Seen,
  proxied = false,
): { request: Request; what: string } {
  const proper = GET_ENDPOINTS.has(endpoint) ? "GET" : "POST";
  const method = g.chance(0.8) ? proper : g.pick(METHODS);
  let url = `${TEST_BASE}${path(g, endpoint)}`;
  if (GET_ENDPOINTS.has(endpoint) || g.chance(0.1)) {
    const query = g.chance(0.7)
      ? rawParams(g, paramPairs(g, endpoint, seen))
      : new URLSearchParams(paramPairs(g, endpoint, seen)).toString();
    if (query !== "" || g.chance(0.5)) url += `?${query}`;
  }
  const headers = new Headers();
  let content: BodyInit | undefined;
  if (method !== "GET" && method !== "HEAD" && method !== "get") {
    const generated = body(g, endpoint, seen);
    content = generated.body;
    if (generated.type !== undefined) headers.set("Content-Type", generated.type);
  }
  if (g.chance(0.05)) headers.set("Content-Length", g.pick(["abc", "-1", "99999999", "0", "1e9"]));
  if (g.chance(proxied ? 0.7 : 0.05)) headers.set("X-Forwarded-For", forwardedFor(g));
  if (g.chance(0.03)) headers.set("Origin", "https://evil.example");
  const request = new Request(url, { method, headers, body: content });
  const size = typeof content === "string" ? content.length : content ? "stream/bytes" : 0;
  return {
    request,
    what: `${method} ${url.slice(0, 200)} [type ${headers.get("content-type")}, body ${size}]`,
  };
}

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
  const query = authorizeQuery({ redirect_uri: REDIRECT, state: asciiString(g, 8) });
  const page = await t.app(new Request(`${TEST_BASE}/authorize?${query}`));
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
    if (hiccup === 3) t.clock.advance(10_000);
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
      assert.equal(typeof entry.value.gitlabUserId, "number", `seed ${SEED}: session user id`);
      assert.equal(typeof entry.value.gitlabUsername, "string");
      assert.notEqual(entry.value.gitlabUsername, "", `seed ${SEED}: session username`);
      const opened = await t.store.getSession(String(id));
      assert.ok(opened, `seed ${SEED}: session ${String(id)} does not open`);
      const gitlab = await t.store.openGitLabTokens(opened.value);
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
    const session = await t.store.findSessionByRefreshToken(secret);
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
    const authorizeWith = (overrides: Record<string, string>) => {
      const query = authorizeQuery({ redirect_uri: REDIRECT, state: "s", ...overrides });
      return t.app(new Request(`${TEST_BASE}/authorize?${query}`));
    };
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
    const long = (char: string) => char.repeat(4096);
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

Deno.test("fuzz regressions: REDIRECT_URI_POLICY=registered with a client_id of kilobytes → 400, not 500", async () => {
  const t = await makeTestApp({ env: { REDIRECT_URI_POLICY: "registered" } });
  try {
    const query = authorizeQuery({ client_id: "y".repeat(3000), redirect_uri: null, state: null });
    const authorize = await t.app(new Request(`${TEST_BASE}/authorize?${query}`));
    assert.equal(authorize.status, 400);
    assert.equal((await authorize.json()).error, "invalid_request");
    // A registered client's code, presented with a client_id of kilobytes.
    const registered = await t.app(
      new Request(`${TEST_BASE}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ redirect_uris: [REDIRECT] }),
      }),
    );
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
    assert.equal(token.status, 400);
    assert.equal((await token.json()).error, "invalid_client");
  } finally {
    t.close();
  }
});
