/**
 * Client authentication at the token endpoint: which method a request uses, and the client it
 * proves. MCP clients are public clients (RFC 6749 §2.1): under `none` they name themselves with
 * `client_id` and prove nothing, and each grant decides what that name must match. Machine
 * clients (`admin clients add`, served while MACHINE_ACCESS_FILE is set) prove who they are with
 * a secret (`client_secret_basic`, `client_secret_post`) or a signed assertion
 * (`private_key_jwt`); each such method is a module beside this one.
 *
 * A request uses at most one method (RFC 6749 §2.3); every failure of a proving method is 401
 * `invalid_client`, with `WWW-Authenticate: Basic` where Basic was tried (§5.2).
 *
 * @see RFC 6749 §2.3 and §3.2.1, OAuth 2.1 §2.4, RFC 7523 §2.2
 */

import { OAuthError } from "../../http/errors.ts";
import type { ClientAuthMethod } from "./method.ts";
import { CLIENT_SECRET_BASIC, CLIENT_SECRET_POST } from "./client_secret.ts";
import { ASSERTION_SIGNING_ALGS, PRIVATE_KEY_JWT } from "./private_key_jwt.ts";
import type { AuthenticatedClient, ClientAuthDeps } from "./method.ts";
import { invalidClient } from "./invalid_client.ts";

export type { AuthenticatedClient, ClientAuthDeps, ClientAuthMethod } from "./method.ts";

/** `none`: a public client names itself, if it does, and proves nothing. */
const NONE: ClientAuthMethod = {
  name: "none",
  uses: () => false,
  authenticate: (_deps, _request, params) =>
    Promise.resolve({ method: "none", clientId: params.get("client_id") }),
};

/** The methods that prove a machine client, in metadata's order. */
const PROVING_METHODS: readonly ClientAuthMethod[] = [
  CLIENT_SECRET_BASIC,
  CLIENT_SECRET_POST,
  PRIVATE_KEY_JWT,
];

/**
 * What says which methods are served: machine clients while MACHINE_ACCESS_FILE is set, and
 * `private_key_jwt` only with BASE_URL too.
 */
export interface ClientAuthSwitch {
  machineAccessFile?: unknown;
  baseUrl?: string;
}

function machineClientsServed(config: ClientAuthSwitch): boolean {
  return config.machineAccessFile !== undefined;
}

/**
 * Whether `private_key_jwt` is served. Without BASE_URL the issuer an assertion's `aud` must
 * name would follow the request's `Host`: an authorization server that received an assertion
 * made for itself, by a client using the same key with us, could replay it here naming its own
 * host. A fixed issuer closes that, as `ci:` rules require BASE_URL for GitLab's ID tokens.
 */
function assertionsServed(config: ClientAuthSwitch): boolean {
  return machineClientsServed(config) && config.baseUrl !== undefined && config.baseUrl !== "";
}

/** The proving methods served under `config`. */
function servedProvingMethods(config: ClientAuthSwitch): ClientAuthMethod[] {
  if (!machineClientsServed(config)) return [];
  return PROVING_METHODS.filter((method) => method !== PRIVATE_KEY_JWT || assertionsServed(config));
}

/** The names metadata lists as `token_endpoint_auth_methods_supported`. */
export function clientAuthMethodNames(config: ClientAuthSwitch): string[] {
  return [NONE, ...servedProvingMethods(config)].map(({ name }) => name);
}

/** What metadata lists as `token_endpoint_auth_signing_alg_values_supported`, if anything. */
export function clientAssertionAlgs(config: ClientAuthSwitch): string[] | undefined {
  return assertionsServed(config) ? [...ASSERTION_SIGNING_ALGS] : undefined;
}

/**
 * Authenticates the client of a token request with the one method it uses; `none` when it uses
 * no proving method, or machine clients are not served (then credentials are not looked at).
 */
export function authenticateClient(
  deps: ClientAuthDeps,
  config: ClientAuthSwitch,
  request: Request,
  params: ReadonlyMap<string, string>,
): Promise<AuthenticatedClient> {
  if (!machineClientsServed(config)) return NONE.authenticate(deps, request, params);
  const used = PROVING_METHODS.filter((method) => method.uses(request, params));
  if (used.length > 1) {
    throw new OAuthError(
      400,
      "invalid_request",
      `Use one client authentication method, not ${used.map(({ name }) => name).join(" and ")}`,
    );
  }
  const method = used[0] ?? NONE;
  if (method !== NONE && !servedProvingMethods(config).includes(method)) {
    throw invalidClient(
      `${method.name} is not served: this server has no BASE_URL, so an assertion's aud ` +
        "cannot name a fixed issuer",
    );
  }
  return method.authenticate(deps, request, params);
}
