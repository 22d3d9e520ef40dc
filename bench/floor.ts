/**
 * Floors for bench/run.ts, measured in the same run as the service: what Deno itself costs on
 * this machine, mirroring ../shared/bench/floor/{hello,kv}.ts so the numbers line up.
 *
 * - `FLOOR=hello`: Deno.serve answering a fixed small JSON, body not read.
 * - `FLOOR=jwt-kv`: parses the form body, signs an HS256 JWT with jose (spec §2.6 claims),
 *   and makes one atomic commit on a file-backed KV (`KV_PATH`): a versionstamp check that the
 *   new refresh-token key is absent, and 2 sets (refresh index + session). No reads.
 *   `KEY_MODE=cryptokey` (default here) imports the HMAC key once, as the service does;
 *   `KEY_MODE=raw` passes the secret bytes to jose, which imports them on every call (the
 *   harness's `floor-jwt-kv-deno`).
 * - `FLOOR=jwt`: the same form parse and HS256 signature as `jwt-kv`, and no storage at all: the
 *   least a refresh grant can cost (issue target: refresh ≥ 0.7× this).
 * - `FLOOR=proxy`: forwards every request to `UPSTREAM_URL` with `fetch` and streams the answer
 *   back, no authentication: the least a gateway in Deno can cost (the gateway case's floor).
 * - `FLOOR=proxy-read`: as `proxy`, doing what issue 21 asks of every call and no more
 *   (floor_proxy_read.ts); not a case of its own, a side of `bench/duel.sh`.
 */

import { SignJWT } from "jose";
import { proxyRead } from "./floor_proxy_read.ts";

const PORT = Number(Deno.env.get("PORT") ?? "8000");
const HOSTNAME = Deno.env.get("HOSTNAME") ?? "127.0.0.1";
const FLOOR = Deno.env.get("FLOOR") ?? "hello";
const SECRET = new TextEncoder().encode(
  Deno.env.get("JWT_SECRET") ?? "bench-secret-bench-secret-bench-secret-0123456789",
);
const TTL = 3600;
const SCOPES = ["mcp:tools", "mcp:resources"];
const JSON_HEADERS = {
  "content-type": "application/json",
  "cache-control": "no-store",
  "pragma": "no-cache",
};

const hmacKey = await crypto.subtle.importKey(
  "raw",
  SECRET,
  { name: "HMAC", hash: "SHA-256" },
  false,
  ["sign"],
);
const signKey = (Deno.env.get("KEY_MODE") ?? "cryptokey") === "raw" ? SECRET : hmacKey;

function randomToken(): string {
  return crypto.getRandomValues(new Uint8Array(32)).toBase64({
    alphabet: "base64url",
    omitPadding: true,
  });
}

function oauthError(status: number, error: string): Response {
  return new Response(JSON.stringify({ error }), { status, headers: JSON_HEADERS });
}

function hello(): Response {
  return new Response(JSON.stringify({ hello: "floor" }), {
    headers: { "content-type": "application/json" },
  });
}

function jwtKv(kv: Deno.Kv | undefined): (request: Request) => Promise<Response> {
  return async (request) => {
    const form = new URLSearchParams(await request.text());
    if (!form.get("refresh_token") && !form.get("code")) {
      return oauthError(400, "invalid_request");
    }
    const now = Date.now();
    const session = {
      id: randomToken(),
      upstreamUserId: 4242,
      upstreamUsername: "bench-user",
      clientId: "bench-client",
      scopes: SCOPES,
    };
    const accessToken = await new SignJWT({
      sid: session.id,
      scope: SCOPES.join(" "),
      gitlab_user: session.upstreamUsername,
    })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .setIssuer(new URL(request.url).origin)
      .setSubject(String(session.upstreamUserId))
      .setAudience(session.clientId)
      .setIssuedAt()
      .setExpirationTime(Math.floor(now / 1000) + TTL)
      .sign(signKey);
    const refreshToken = randomToken();
    const refreshKey = ["refresh", refreshToken];
    const result = kv === undefined ? { ok: true } : await kv.atomic()
      .check({ key: refreshKey, versionstamp: null })
      .set(refreshKey, session.id)
      .set(["session", session.id], {
        ...session,
        mcpAccessToken: accessToken,
        mcpRefreshToken: refreshToken,
        mcpTokenExpiry: now + TTL * 1000,
        gitlabAccessToken: "glpat-xxxxxxxxxxxxxxxxxxxx",
        gitlabRefreshToken: "glrt-xxxxxxxxxxxxxxxxxxxxxxxx",
        upstreamTokenExpiry: now + 7_200_000,
        createdAt: now,
        updatedAt: now,
      })
      .commit();
    if (!result.ok) return oauthError(500, "server_error");
    return new Response(
      JSON.stringify({
        access_token: accessToken,
        token_type: "Bearer",
        expires_in: TTL,
        refresh_token: refreshToken,
        scope: SCOPES.join(" "),
      }),
      { headers: JSON_HEADERS },
    );
  };
}

function proxy(upstream: URL): (request: Request) => Promise<Response> {
  return async (request) => {
    const target = new URL(upstream);
    target.search = new URL(request.url).search;
    const response = await fetch(target, {
      method: request.method,
      headers: { "content-type": request.headers.get("content-type") ?? "application/json" },
      body: request.body,
    });
    return new Response(response.body, { status: response.status, headers: response.headers });
  };
}

let handler: (request: Request) => Response | Promise<Response>;
if (FLOOR === "hello") {
  handler = hello;
} else if (FLOOR === "jwt-kv") {
  handler = jwtKv(await Deno.openKv(Deno.env.get("KV_PATH") ?? "/tmp/bench-floor-kv.sqlite"));
} else if (FLOOR === "jwt") {
  handler = jwtKv(undefined);
} else if (FLOOR === "proxy") {
  handler = proxy(new URL(Deno.env.get("UPSTREAM_URL") ?? "http://127.0.0.1:18092/mcp"));
} else if (FLOOR === "proxy-read") {
  handler = proxyRead(new URL(Deno.env.get("UPSTREAM_URL") ?? "http://127.0.0.1:18092/mcp"));
} else {
  throw new Error(`FLOOR must be hello, jwt, jwt-kv, proxy or proxy-read, got ${FLOOR}`);
}
Deno.serve({ port: PORT, hostname: HOSTNAME, onListen() {} }, handler);
