/**
 * What `/introspect` says of a token (RFC 7662 §2.2): the claims of an access token we signed
 * whose session is alive, and `{active: false}` for anything else, never why.
 */

import { isBearerTokenSyntax, MAX_ACCESS_TOKEN_LENGTH } from "../http/bearer_token.ts";
import type { Clock } from "../clock.ts";
import type { AccessTokenClaims, TokenSigner } from "../jwt.ts";
import type { Store } from "../store/mod.ts";

/** The answer for a live access token. */
export interface ActiveToken {
  active: true;
  sub: string;
  client_id: string;
  scope: string;
  exp: number;
  iat: number;
  iss: string;
  aud: string;
  sid: string;
  gitlab_user: string;
  token_type: "Bearer";
  /**
   * The MCP server the token is for (RFC 8707), so a resource server can refuse another's;
   * absent for a token from before resource indicators.
   */
  resource?: string;
}

/** The answer for anything else: expired, revoked, unknown, a refresh token, malformed. */
export interface InactiveToken {
  active: false;
}

const INACTIVE: InactiveToken = { active: false };

/** What introspection reads. */
export interface IntrospectDeps {
  signer: Pick<TokenSigner, "readSigned">;
  store: Pick<Store, "getSession">;
  clock: Clock;
}

/**
 * The signature (any of our keys or secrets) and `exp` decide whether it is ours and current,
 * then the session. The issuer is not compared: a token only we could sign is ours whichever
 * host name it was issued under, and the resource server reads `iss` from the answer.
 */
export async function introspect(
  deps: IntrospectDeps,
  token: string,
): Promise<ActiveToken | InactiveToken> {
  if (token.length > MAX_ACCESS_TOKEN_LENGTH || token.split(".").length !== 3) return INACTIVE;
  if (!isBearerTokenSyntax(token)) return INACTIVE;
  const claims = await deps.signer.readSigned(token) as Partial<ClaimsWithTimes> | null;
  if (!claims || !isComplete(claims)) return INACTIVE;
  if (claims.exp * 1000 <= deps.clock.now()) return INACTIVE;
  const session = (await deps.store.getSession(claims.sid))?.value;
  if (!session || session.upstreamUserId !== claims.sub) return INACTIVE;
  return {
    active: true,
    sub: claims.sub,
    client_id: session.clientId,
    scope: claims.scope,
    exp: claims.exp,
    iat: claims.iat,
    iss: claims.iss,
    aud: claims.aud,
    sid: claims.sid,
    gitlab_user: claims.gitlab_user,
    token_type: "Bearer",
    ...(typeof claims.resource === "string" ? { resource: claims.resource } : {}),
  };
}

type ClaimsWithTimes = AccessTokenClaims & { exp: number; iat: number };

function isComplete(claims: Partial<ClaimsWithTimes>): claims is ClaimsWithTimes {
  const strings = [claims.sub, claims.scope, claims.iss, claims.sid, claims.gitlab_user];
  return strings.every((value) => typeof value === "string") &&
    typeof claims.aud === "string" && typeof claims.exp === "number" &&
    typeof claims.iat === "number";
}
