/**
 * A BASE_URL with a path (`http://host/gw`), reached without a proxy that rewrites paths: every
 * URL the metadata advertises answers there (`/gw/register`, `/gw/token`, the JWKS, the device
 * page's poll URL), the gateway at `/gw/mcp`, the documents at the root with the path inserted
 * (RFC 8414 §3.1, RFC 9728 §3.1). The MCP SDK v1 client, given only `{BASE_URL}/mcp`,
 * discovers, registers, signs in and calls a tool, as the real service process.
 */

import assert from "node:assert/strict";
import { auth, type OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js";
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";
import { followPageWithoutBrowser, spawnWithGitLab } from "./_service.ts";
import { withEnv } from "./_helpers.ts";
import { startMcpUpstream, type WhoAmI } from "./_mcp_upstream.ts";
import { v1Whoami } from "./_servers_clients.ts";
import type { SimulatedGitLab } from "../dev/simulated_gitlab.ts";

/** An MCP host's OAuthClientProvider, in memory, taking the user through the page itself. */
class Provider implements OAuthClientProvider {
  client?: OAuthClientInformationMixed;
  saved?: OAuthTokens;
  verifier?: string;
  callback?: URL;
  readonly redirectUrl = "http://127.0.0.1:9/callback";

  constructor(private readonly gitlab: SimulatedGitLab) {}

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: "base path test",
      redirect_uris: [this.redirectUrl],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation = () => this.client;
  saveClientInformation(info: OAuthClientInformationMixed): void {
    this.client = info;
  }
  tokens = () => this.saved;
  saveTokens(tokens: OAuthTokens): void {
    this.saved = tokens;
  }
  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier;
  }
  codeVerifier(): string {
    return this.verifier ?? "";
  }
  async redirectToAuthorization(url: URL): Promise<void> {
    this.callback = (await followPageWithoutBrowser(url, this.gitlab)).callback;
  }
}

const DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code";

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  listener.close();
  return listener.addr.port;
}

Deno.test("BASE_URL with a path: the SDK discovers, registers, signs in and calls /gw/mcp; every advertised URL answers", async () => {
  const upstream = startMcpUpstream();
  const port = freePort();
  const base = `http://127.0.0.1:${port}/gw`;
  const { gitlab, close } = await spawnWithGitLab("base-path-app", {
    PORT: String(port),
    BASE_URL: base,
    MCP_UPSTREAM_URL: upstream.url,
  });
  try {
    const log: string[] = [];
    const fetchFn: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      log.push(`${init?.method ?? "GET"} ${new Request(input).url} ${response.status}`);
      return response;
    };
    const provider = new Provider(gitlab);
    const serverUrl = `${base}/mcp`;
    assert.equal(await auth(provider, { serverUrl, fetchFn }), "REDIRECT", log.join("\n"));
    assert.deepEqual(log, [
      `GET http://127.0.0.1:${port}/.well-known/oauth-protected-resource/gw/mcp 200`,
      `GET http://127.0.0.1:${port}/.well-known/oauth-authorization-server/gw 200`,
      `POST ${base}/register 201`,
    ]);
    const callback = provider.callback!;
    assert.equal(callback.searchParams.get("iss"), base);
    const authorizationCode = callback.searchParams.get("code")!;
    assert.equal(
      await auth(provider, { serverUrl, authorizationCode, fetchFn }),
      "AUTHORIZED",
      log.join("\n"),
    );
    assert.ok(log.includes(`POST ${base}/token 200`), log.join("\n"));
    const token = provider.saved!.access_token;
    const who: WhoAmI = JSON.parse(await v1Whoami(serverUrl, token));
    assert.match(who.authorization ?? "", /^Bearer /);

    // The rest of what the metadata advertises answers under the path too; the documents are
    // at the root only.
    const metadata = await (await fetch(
      `http://127.0.0.1:${port}/.well-known/oauth-authorization-server/gw`,
    )).json();
    const appended = await fetch(`${base}/.well-known/oauth-authorization-server`);
    assert.equal(appended.status, 404);
    await appended.body?.cancel();
    for (const field of ["service_documentation", "jwks_uri"]) {
      if (metadata[field] === undefined) continue;
      const response = await fetch(metadata[field]);
      await response.body?.cancel();
      assert.equal(response.status, 200, `${field} ${metadata[field]}`);
    }
    const registered = await fetch(metadata.registration_endpoint, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ grant_types: [DEVICE_GRANT], token_endpoint_auth_method: "none" }),
    });
    const { client_id } = await registered.json();
    assert.equal(registered.status, 201);
    const device = await fetch(metadata.device_authorization_endpoint, {
      method: "POST",
      body: new URLSearchParams({ client_id }),
    });
    const started = await device.json();
    assert.equal(device.status, 200, JSON.stringify(started));
    assert.equal(started.verification_uri, `${base}/device`);
    const page = await fetch(started.verification_uri);
    await page.body?.cancel();
    assert.equal(page.status, 200);
    const revoked = await fetch(metadata.revocation_endpoint, {
      method: "POST",
      body: new URLSearchParams({ token: provider.saved!.refresh_token! }),
    });
    await revoked.body?.cancel();
    assert.equal(revoked.status, 200);
  } finally {
    await close();
    await upstream.close();
  }
});

Deno.test("BASE_URL with a path: a path a stripping proxy sends keeps its endpoint, even where it starts with BASE_URL's path", () =>
  withEnv({ BASE_URL: "https://x.test/oauth" }, async (t) => {
    // `/oauth/oauth/poll` through a proxy that strips `/oauth`, or as it came: the poll both ways.
    for (const path of ["/oauth/poll", "/oauth/oauth/poll"]) {
      const response = await t.app(new Request(`https://x.test${path}`));
      assert.equal(response.status, 400, path);
      assert.deepEqual(Object.keys(await response.json()), ["status", "error"], path);
    }
    for (const path of ["/oauth/token", "/token"]) {
      const response = await t.app(new Request(`https://x.test${path}`, { method: "POST" }));
      assert.equal((await response.json()).error, "invalid_request", path);
      assert.equal(response.status, 400, path);
    }
  }));
