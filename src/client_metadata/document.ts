/**
 * Client ID Metadata Documents: which client ids are the URL of one, and what a fetched
 * document must say to be accepted (the client's own word on its redirect URIs and name).
 *
 * @see draft-ietf-oauth-client-id-metadata-document §3–§4, MCP authorization spec
 *   ("Client ID Metadata Documents")
 */

import { type GrantTypes, parseClientMetadata } from "../clients/registration.ts";
import { OAuthError } from "../http/errors.ts";
import type { ClientMetadataDocument } from "../store/records.ts";

export type { ClientMetadataDocument };

/** A document that could not be fetched or does not validate; the message names the problem. */
export class ClientMetadataError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClientMetadataError";
  }
}

/**
 * The document URL of a client id that is one, checked as the draft asks (no fragment, no
 * credentials, no dot segments, in normal form, so that the string comparison with the
 * document's `client_id` means something); throws ClientMetadataError.
 */
export function clientMetadataUrl(clientId: string): URL {
  const url = URL.parse(clientId);
  if (!url || url.protocol !== "https:") throw problem("client_id is not an https URL");
  if (clientId.includes("#")) throw problem("client_id must not contain a fragment");
  if (url.username || url.password) throw problem("client_id must not contain credentials");
  if (/\/\.{1,2}(\/|$|\?)/.test(clientId)) {
    throw problem("client_id must not contain dot segments");
  }
  if (url.href !== clientId) throw problem("client_id is not in normal form");
  return url;
}

/**
 * The document in `body`, accepted only when it is a JSON object whose `client_id` equals the
 * URL exactly, with non-empty `redirect_uris` and no client authentication; throws
 * ClientMetadataError.
 */
export function parseClientMetadataDocument(
  body: string,
  clientId: string,
  grantTypes: GrantTypes,
): ClientMetadataDocument {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw problem("the document is not JSON");
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw problem("the document is not a JSON object");
  }
  const input = parsed as Record<string, unknown>;
  if (input.client_id !== clientId) {
    throw problem("the document's client_id is not its URL");
  }
  const { redirect_uris, token_endpoint_auth_method, client_name } = input;
  const grant_types = knownGrantTypes(input.grant_types, grantTypes.known);
  try {
    // The registration rules, on the fields that matter here; other fields are the client's.
    const metadata = parseClientMetadata(
      { redirect_uris, token_endpoint_auth_method, client_name, grant_types },
      grantTypes.known,
      grantTypes.defaults,
    );
    return {
      clientId,
      redirectUris: metadata.redirect_uris,
      ...(metadata.client_name ? { clientName: metadata.client_name } : {}),
      ...(grant_types ? { grantTypes: metadata.grant_types } : {}),
    };
  } catch (error) {
    if (error instanceof OAuthError) throw problem(error.description);
    throw error;
  }
}

/**
 * The grant types a document lists that this service knows (others are the client's business);
 * undefined when it lists none of them, which means the default.
 */
function knownGrantTypes(listed: unknown, served: readonly string[]): string[] | undefined {
  if (!Array.isArray(listed)) return undefined;
  const known = served.filter((type) => listed.includes(type));
  return known.length > 0 ? known : undefined;
}

function problem(message: string): ClientMetadataError {
  return new ClientMetadataError(message);
}
