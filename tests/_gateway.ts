/**
 * Gateway mode in-process, shared by the gateway_*_test.ts files: the real app over an
 * in-memory KV and a fake GitLab, forwarding to MCP servers on loopback that each test scripts.
 */

import assert from "node:assert/strict";
import { issueTokens, makeTestApp, TEST_BASE, type TestApp } from "./_helpers.ts";

export const MCP = `${TEST_BASE}/mcp`;
export const PRM = `${TEST_BASE}/.well-known/oauth-protected-resource/mcp`;

/** An MCP server on loopback answering with `handler`; counts requests. */
export interface ScriptedUpstream {
  url: string;
  requests: Request[];
  close(): Promise<void>;
}

export function startScripted(
  handler: (request: Request) => Response | Promise<Response>,
): ScriptedUpstream {
  const requests: Request[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    requests.push(request);
    return handler(request);
  });
  const upstream: ScriptedUpstream = {
    url: `http://127.0.0.1:${server.addr.port}/mcp`,
    requests,
    close: () => server.shutdown(),
  };
  return upstream;
}

/** An app in gateway mode in front of `upstreamUrl`, with a signed-in user. */
export async function gatewayApp(
  upstreamUrl: string,
  env: Record<string, string> = {},
): Promise<{ t: TestApp; accessToken: string }> {
  const t = await makeTestApp({ env: { MCP_UPSTREAM_URL: upstreamUrl, ...env } });
  const { access_token } = await issueTokens(t);
  return { t, accessToken: access_token };
}

/** A request to /mcp (POST unless `init` says otherwise), with `token` as the bearer if given. */
export function mcpRequest(
  t: TestApp,
  token: string | undefined,
  init: RequestInit = {},
): Promise<Response> {
  const headers = new Headers(init.headers);
  if (token !== undefined) headers.set("Authorization", `Bearer ${token}`);
  return t.app(new Request(MCP, { method: "POST", ...init, headers }));
}

/** An MCP server's answer that shows what reached it: the token headers, body and query. */
export const echo = async (request: Request): Promise<Response> =>
  Response.json({
    authorization: request.headers.get("authorization"),
    privateToken: request.headers.get("private-token"),
    body: await request.text(),
    search: new URL(request.url).search,
  });

/** Our `invalid_token` challenge pointing at our resource metadata, matching `description`. */
export function assertChallenge(response: Response, description?: RegExp): void {
  const challenge = response.headers.get("www-authenticate") ?? "";
  assert.match(
    challenge,
    /^Bearer error="invalid_token", error_description="[^"\\]+", resource_metadata="[^"]+", scope="mcp:tools mcp:resources"$/,
  );
  assert.ok(challenge.includes(`resource_metadata="${PRM}", `), challenge);
  if (description) assert.match(challenge, description);
}
