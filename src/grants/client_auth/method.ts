/** What every client authentication method is, and what it establishes. */

import type { Clock } from "../../clock.ts";
import type { MachineClientRecord, Store } from "../../store/mod.ts";

/** The client a token request comes from, as its authentication established it. */
export interface AuthenticatedClient {
  /** The method that established it (RFC 7591's `token_endpoint_auth_method` values). */
  method: string;
  /** The `client_id` the request names; under `none` a claim, not a proof. */
  clientId?: string;
  /** The machine client a proving method authenticated (absent under `none`). */
  machine?: MachineClientRecord;
}

/** What a proving method reads: the machine clients, spent assertion ids, the time. */
export interface ClientAuthDeps {
  store: Pick<Store, "getMachineClient" | "spendAssertionId">;
  clock: Clock;
  /** The issuer (base URL without a trailing slash): an assertion's `aud` names it. */
  issuer: string;
  /** The token endpoint's URL, which an assertion's `aud` may name instead. */
  tokenEndpoint: string;
}

/** One client authentication method. */
export interface ClientAuthMethod {
  /** Its name in metadata (`token_endpoint_auth_methods_supported`). */
  readonly name: string;
  /** Whether the request uses this method. */
  uses(request: Request, params: ReadonlyMap<string, string>): boolean;
  /** The client the request proves; throws OAuthError 401 `invalid_client` when it proves none. */
  authenticate(
    deps: ClientAuthDeps,
    request: Request,
    params: ReadonlyMap<string, string>,
  ): Promise<AuthenticatedClient>;
}
