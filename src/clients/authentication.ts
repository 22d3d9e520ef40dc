/**
 * Client authentication at the token endpoint: which method a request uses, and the client it
 * proves. Today the one method is `none`: MCP clients are public clients (RFC 6749 §2.1), which
 * name themselves with `client_id` and prove nothing; each grant decides what that name must
 * match. A method that proves something (`client_secret_basic`, `client_secret_post`,
 * `private_key_jwt`) is one more entry of CLIENT_AUTH_METHODS.
 *
 * @see RFC 6749 §2.3 and §3.2.1, OAuth 2.1 §2.4
 */

/** The client a token request comes from, as its authentication established it. */
export interface AuthenticatedClient {
  /** The method that established it (RFC 7591's `token_endpoint_auth_method` values). */
  method: string;
  /** The `client_id` the request names; under `none` a claim, not a proof. */
  clientId?: string;
}

/** One client authentication method. */
export interface ClientAuthMethod {
  /** Its name in metadata (`token_endpoint_auth_methods_supported`). */
  readonly name: string;
  /** Whether the request uses this method (the first method that says so authenticates it). */
  uses(request: Request, params: ReadonlyMap<string, string>): boolean;
  /** The client the request proves; throws OAuthError 401 `invalid_client` when it proves none. */
  authenticate(
    request: Request,
    params: ReadonlyMap<string, string>,
  ): Promise<AuthenticatedClient>;
}

/** `none`: a public client names itself, if it does, and proves nothing. */
const NONE: ClientAuthMethod = {
  name: "none",
  uses: () => true,
  authenticate: (_request, params) =>
    Promise.resolve({ method: "none", clientId: params.get("client_id") }),
};

/** The methods the token endpoint accepts, in the order they are tried. */
export const CLIENT_AUTH_METHODS: readonly ClientAuthMethod[] = [NONE];

/** The names metadata lists as `token_endpoint_auth_methods_supported`. */
export const CLIENT_AUTH_METHOD_NAMES: readonly string[] = CLIENT_AUTH_METHODS.map((method) =>
  method.name
);

/** Authenticates the client of a token request with the first method it uses. */
export function authenticateClient(
  request: Request,
  params: ReadonlyMap<string, string>,
): Promise<AuthenticatedClient> {
  const method = CLIENT_AUTH_METHODS.find((candidate) => candidate.uses(request, params)) ?? NONE;
  return method.authenticate(request, params);
}
