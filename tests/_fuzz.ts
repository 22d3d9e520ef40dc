/**
 * Generators for the fuzz test: a seeded random source and builders of requests of every
 * sort — valid-looking, malformed, huge, hostile — for each endpoint, reusing the secrets a
 * run has been handed so the stateful paths are reached.
 */

import { MAX_BODY_BYTES } from "../src/http/params.ts";
import { PKCE, TEST_BASE, TEST_REDIRECT as REDIRECT } from "./_helpers.ts";

/** The endpoints the fuzz sends to (`unknown`: paths the service does not serve). */
export const ENDPOINTS = [
  "authorize",
  "poll",
  "token",
  "register",
  "revoke",
  "metadata",
  "unknown",
] as const;
/** One endpoint of `ENDPOINTS`. */
export type Endpoint = typeof ENDPOINTS[number];

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

/** A seeded random source with the draws the generators need. */
export class Gen {
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
export interface Seen {
  flowStates: string[];
  codes: string[];
  refreshTokens: string[];
  accessTokens: string[];
  clientIds: string[];
  /** Every flow state, code and token ever handed out. */
  secrets: Set<string>;
}

/** A run that has seen nothing yet. */
export function newSeen(): Seen {
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
export function remember(seen: Seen, kind: Exclude<keyof Seen, "secrets">, value: string): void {
  const list = seen[kind];
  list.push(value);
  if (list.length > 100) list.splice(0, list.length - 100);
  if (kind !== "clientIds") seen.secrets.add(value);
}

/** A string of `length` characters drawn from the unreserved URL alphabet. */
export function asciiString(g: Gen, length: number): string {
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
  const target = g.chance(0.5) ? MAX_BODY_BYTES - 64 + g.int(128) : g.int(100 * 1024);
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
      return g.chance(0.8) ? g.pick(UNKNOWN_PATHS) : `/zz-${encode(g, anyString(g, newSeen()))}`;
  }
}

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
export function generate(
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
