/**
 * `POST /register`: dynamic client registration for public clients.
 *
 * @see RFC 7591 §3
 */

import { parseClientMetadata } from "../clients/registration.ts";
import type { Clock } from "../clock.ts";
import type { ClientsConfig } from "../clients/config.ts";
import type { RequestContext } from "../http/request_context.ts";
import type { Logger } from "../logger.ts";
import { type Store, StoreUnavailableError } from "../store/mod.ts";
import { randomToken } from "../crypto.ts";
import { OAuthError } from "../http/errors.ts";
import { readJson } from "../http/params.ts";
import { json, NO_STORE } from "../http/responses.ts";
import { isAllowedRedirect } from "../clients/redirect_allow_list.ts";
import type { ClientMetadata, ClientRecord } from "../store/records.ts";
import { DEFAULT_GRANT_TYPES, registrableGrantTypes } from "../grants/registry.ts";
import type { GrantSwitches } from "../grants/grant.ts";

/**
 * The most metadata one registration may store: open registration must not let anyone fill the
 * KV (each field is bounded too, but twenty long redirect URIs add up).
 */
export const MAX_REGISTRATION_BYTES = 4096;

/** What registration uses of the service. */
interface RegisterDeps {
  store: Pick<Store, "registerClient">;
  clock: Clock;
  logger: Logger;
  config:
    & Pick<ClientsConfig, "allowedRedirectUris">
    & GrantSwitches
    & { requestBodyTimeoutMs: number };
}

/** Handles `POST /register`; answers 201 with the client id and the metadata echoed. */
export async function handleRegister(ctx: RequestContext<RegisterDeps>): Promise<Response> {
  const { store, clock, logger } = ctx.deps;
  const metadata = parseClientMetadata(
    await readJson(ctx.request, ctx.deps.config.requestBodyTimeoutMs),
    registrableGrantTypes(ctx.deps.config),
    DEFAULT_GRANT_TYPES,
  );
  requireAllowedRedirects(ctx, metadata.redirect_uris);
  requireStorableSize(metadata);
  const client: ClientRecord = {
    clientId: randomToken(16),
    clientIdIssuedAt: Math.floor(clock.now() / 1000),
    redirectUris: metadata.redirect_uris,
    clientName: metadata.client_name,
    metadata,
  };
  try {
    await store.registerClient(client);
  } catch (error) {
    // A database that cannot answer now is the app's 503 with Retry-After, not a failure here.
    if (error instanceof StoreUnavailableError) throw error;
    logger.error("client registration failed", { requestId: ctx.requestId, error: String(error) });
    throw new OAuthError(500, "server_error", "Could not store the registration");
  }
  logger.info("client registered", {
    requestId: ctx.requestId,
    clientId: client.clientId,
    clientName: client.clientName,
  });
  return json(
    { client_id: client.clientId, client_id_issued_at: client.clientIdIssuedAt, ...metadata },
    201,
    NO_STORE,
  );
}

/** Refuses metadata whose stored form exceeds MAX_REGISTRATION_BYTES (RFC 7591 §3.2.2). */
function requireStorableSize(metadata: ClientMetadata): void {
  const bytes = new TextEncoder().encode(JSON.stringify(metadata)).length;
  if (bytes > MAX_REGISTRATION_BYTES) {
    throw new OAuthError(
      400,
      "invalid_client_metadata",
      `The registration metadata exceeds ${MAX_REGISTRATION_BYTES} bytes`,
    );
  }
}

/** ALLOWED_REDIRECT_URIS, when set: a registration may carry only allowed redirect URIs. */
function requireAllowedRedirects(
  ctx: RequestContext<RegisterDeps>,
  redirectUris: string[],
): void {
  const patterns = ctx.deps.config.allowedRedirectUris;
  if (!patterns) return;
  const refused = redirectUris.find((uri) => !isAllowedRedirect(uri, patterns));
  if (refused === undefined) return;
  throw new OAuthError(
    400,
    "invalid_redirect_uri",
    `redirect_uri is not allowed by this service: ${refused.slice(0, 100)}`,
  );
}
