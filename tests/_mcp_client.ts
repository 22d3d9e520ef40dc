/**
 * An MCP client's side of the tests: the OAuth state an MCP host keeps (in memory, optionally
 * identified by a Client ID Metadata Document URL), and what a service's request log says it
 * was asked.
 */

import assert from "node:assert/strict";
// @ts-types="@modelcontextprotocol/sdk/client/auth"
import type { OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js";
// @ts-types="@modelcontextprotocol/sdk/shared/auth"
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";

/** An MCP client's OAuth state, in memory; hands the authorization URL to the test. */
export class MemoryOAuthProvider implements OAuthClientProvider {
  authorizationUrl?: URL;
  #client?: OAuthClientInformationMixed;
  #tokens?: OAuthTokens;
  #verifier = "";

  /** With `clientMetadataUrl`, the SDK uses it as the client id instead of registering. */
  constructor(
    readonly callback: string,
    readonly clientName: string = "MCP test client",
    readonly clientMetadataUrl: string | undefined = undefined,
  ) {}

  get redirectUrl(): string {
    return this.callback;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: this.clientName,
      redirect_uris: [this.callback],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() {
    return this.#client;
  }
  saveClientInformation(client: OAuthClientInformationMixed) {
    this.#client = client;
  }
  tokens() {
    return this.#tokens;
  }
  saveTokens(tokens: OAuthTokens) {
    this.#tokens = tokens;
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(verifier: string) {
    this.#verifier = verifier;
  }
  codeVerifier() {
    return this.#verifier;
  }
}

/** `METHOD path status` of every request the service logged. */
export function requestLines(logs: string[]): string[] {
  return logs.flatMap((line) => {
    try {
      const { message, method, path, status } = JSON.parse(line);
      return message === "request" ? [`${method} ${path} ${status}`] : [];
    } catch {
      return [];
    }
  });
}

/**
 * Asserts the service's log shows an MCP client's whole sign-in: refused at `/mcp`, discovery
 * (RFC 9728, RFC 8414), registration, the token exchange and an accepted `/mcp` request.
 */
export function assertMcpSignInRequests(logs: string[]): void {
  const requests = requestLines(logs);
  for (
    const expected of [
      "POST /mcp 401",
      "GET /.well-known/oauth-protected-resource/mcp 200",
      "GET /.well-known/oauth-authorization-server 200",
      "POST /register 201",
      "POST /token 200",
      "POST /mcp 200",
    ]
  ) {
    assert.ok(requests.includes(expected), `${expected} in ${requests.join(", ")}`);
  }
}

/** What a Streamable HTTP client sends with a JSON-RPC POST. */
export const MCP_POST_HEADERS = {
  Accept: "application/json, text/event-stream",
  "Content-Type": "application/json",
} as const;

/** An MCP `initialize` request's JSON-RPC body, from a client named `clientName`. */
export function initializeBody(clientName: string): string {
  return JSON.stringify({
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: clientName, version: "1.0.0" },
    },
  });
}

/** POST an MCP `initialize` to `{serviceUrl}/mcp` with `accessToken` as the Bearer token. */
export function postInitialize(
  serviceUrl: string,
  accessToken: string,
  clientName: string,
): Promise<Response> {
  return fetch(`${serviceUrl}/mcp`, {
    method: "POST",
    headers: { ...MCP_POST_HEADERS, Authorization: `Bearer ${accessToken}` },
    body: initializeBody(clientName),
  });
}
