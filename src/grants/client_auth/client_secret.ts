/**
 * `client_secret_basic` (the client id and secret in an `Authorization: Basic` header, each
 * form-encoded first) and `client_secret_post` (both in the form): the secret `admin clients add
 * --secret` printed, checked against the SHA-256 the store keeps.
 *
 * @see RFC 6749 §2.3.1, RFC 7617
 */

import { sha256Base64Url, timingSafeEqual } from "../../crypto.ts";
import type { AuthenticatedClient, ClientAuthDeps, ClientAuthMethod } from "./method.ts";
import { invalidClient } from "./invalid_client.ts";

/** The hash of a machine client's secret, as the store keeps it. */
export function clientSecretHash(secret: string): string {
  return sha256Base64Url(`client_secret:${secret}`);
}

const BASIC = /^basic +/i;

/** `client_secret_basic`. */
export const CLIENT_SECRET_BASIC: ClientAuthMethod = {
  name: "client_secret_basic",
  uses: (request) => BASIC.test(request.headers.get("authorization") ?? ""),
  authenticate(deps, request, params) {
    const credentials = basicCredentials(request.headers.get("authorization") ?? "");
    if (!credentials) throw invalidClient("The Basic credentials are malformed");
    const named = params.get("client_id");
    if (named !== undefined && named !== credentials.clientId) {
      throw invalidClient("client_id differs from the Basic credentials' client");
    }
    return checkSecret(deps, "client_secret_basic", credentials);
  },
};

/** `client_secret_post`. */
export const CLIENT_SECRET_POST: ClientAuthMethod = {
  name: "client_secret_post",
  uses: (_request, params) => params.has("client_secret"),
  authenticate(deps, _request, params) {
    const clientId = params.get("client_id");
    if (!clientId) throw invalidClient("client_secret needs client_id");
    return checkSecret(deps, "client_secret_post", {
      clientId,
      secret: params.get("client_secret") ?? "",
    });
  },
};

interface Credentials {
  clientId: string;
  secret: string;
}

/**
 * The client id and secret of a Basic header: base64 of `id:secret`, each form-urlencoded
 * (RFC 6749 §2.3.1); undefined when it is not that.
 */
function basicCredentials(header: string): Credentials | undefined {
  const encoded = header.replace(BASIC, "").trim();
  let decoded: string;
  try {
    decoded = new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.fromBase64(encoded));
  } catch {
    return undefined;
  }
  const colon = decoded.indexOf(":");
  if (colon < 1) return undefined;
  try {
    return {
      clientId: formDecode(decoded.slice(0, colon)),
      secret: formDecode(decoded.slice(colon + 1)),
    };
  } catch {
    return undefined;
  }
}

function formDecode(text: string): string {
  return decodeURIComponent(text.replaceAll("+", " "));
}

/** The machine client whose secret this is; 401 `invalid_client` for any other answer. */
async function checkSecret(
  deps: ClientAuthDeps,
  method: string,
  { clientId, secret }: Credentials,
): Promise<AuthenticatedClient> {
  const client = await deps.store.getMachineClient(clientId);
  const given = clientSecretHash(secret);
  const credential = client?.credential;
  // One answer for an unknown client, a client with keys and a wrong secret: none tells more.
  if (
    !client || credential?.method !== "client_secret" ||
    !timingSafeEqual(given, credential.secretHash)
  ) {
    throw invalidClient("Client authentication failed");
  }
  return { method, clientId, machine: client };
}
