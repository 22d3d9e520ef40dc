/**
 * The MCP client side of end-to-end tests: an in-memory OAuthClientProvider as an MCP host
 * application would implement it (optionally identified by a Client ID Metadata Document URL),
 * and the request lines a service logged.
 */

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
  constructor(readonly callback: string, readonly clientMetadataUrl?: string) {}

  get redirectUrl(): string {
    return this.callback;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: "gateway e2e client",
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
