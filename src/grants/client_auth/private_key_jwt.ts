/**
 * `private_key_jwt`: the client signs a short-lived JWT with a key whose public half the
 * operator registered (`admin clients add --jwks-file`), and sends it as `client_assertion`.
 * Checked as RFC 7523 §3 says, with this service's limits: `iss` = `sub` = the client id, `aud`
 * our issuer or token endpoint (a string or an array), `alg` ES256, RS256 or EdDSA (or Ed25519), `exp` at most
 * five minutes ahead, `jti` required and accepted once.
 *
 * @see RFC 7523 §2.2 and §3, RFC 7521 §4.2, OpenID Connect Core §9
 */

import { createLocalJWKSet, decodeJwt, errors, type JWK, jwtVerify } from "jose";
import type { AuthenticatedClient, ClientAuthDeps, ClientAuthMethod } from "./method.ts";
import { invalidClient } from "./invalid_client.ts";

/** `client_assertion_type` of a JWT assertion (RFC 7523 §2.2). */
export const JWT_BEARER_CLIENT_ASSERTION = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/**
 * The algorithms an assertion may be signed with; Ed25519 is EdDSA's fully-specified name
 * (RFC 9864), which newer clients (oauth4webapi) put in the header.
 */
export const ASSERTION_SIGNING_ALGS = ["ES256", "RS256", "EdDSA", "Ed25519"] as const;

/** The longest an assertion may still be valid when presented. */
export const MAX_ASSERTION_LIFETIME_SECONDS = 300;
/** Leeway for clocks that disagree a little (on `exp`, `nbf`, `iat`). */
const CLOCK_TOLERANCE_SECONDS = 30;
/** Longer than any sensible `jti`; keeps the store's keys bounded. */
const MAX_JTI_LENGTH = 256;

/** `private_key_jwt`. */
export const PRIVATE_KEY_JWT: ClientAuthMethod = {
  name: "private_key_jwt",
  uses: (_request, params) => params.has("client_assertion") || params.has("client_assertion_type"),
  authenticate: authenticateAssertion,
};

async function authenticateAssertion(
  deps: ClientAuthDeps,
  _request: Request,
  params: ReadonlyMap<string, string>,
): Promise<AuthenticatedClient> {
  if (params.get("client_assertion_type") !== JWT_BEARER_CLIENT_ASSERTION) {
    throw invalidClient(`client_assertion_type must be ${JWT_BEARER_CLIENT_ASSERTION}`);
  }
  const assertion = params.get("client_assertion");
  if (!assertion) throw invalidClient("client_assertion is required");
  const clientId = assertedClient(assertion);
  const named = params.get("client_id");
  if (named !== undefined && named !== clientId) {
    throw invalidClient("client_id differs from the assertion's sub");
  }
  const client = await deps.store.getMachineClient(clientId);
  if (!client || client.credential.method !== "private_key_jwt") {
    throw invalidClient("No client with registered keys has this client_id");
  }
  const { exp, jti } = await verifyAssertion(deps, assertion, clientId, client.credential.jwks);
  const keepUntil = (exp + CLOCK_TOLERANCE_SECONDS) * 1000;
  if (!await deps.store.spendAssertionId(`client:${clientId}`, jti, keepUntil)) {
    throw invalidClient("The client assertion was used before (jti)");
  }
  return { method: "private_key_jwt", clientId, machine: client };
}

/** The client an assertion names: its `sub`, which must equal its `iss` (checked unsigned). */
function assertedClient(assertion: string): string {
  let claims;
  try {
    claims = decodeJwt(assertion);
  } catch {
    throw invalidClient("client_assertion is not a JWT");
  }
  const { iss, sub } = claims;
  if (typeof sub !== "string" || sub === "") throw invalidClient("The assertion has no sub");
  if (iss !== sub) throw invalidClient("The assertion's iss must be its sub, the client_id");
  return sub;
}

/** Signature and claims; the verified `exp` and `jti`. */
async function verifyAssertion(
  { clock, issuer, tokenEndpoint }: ClientAuthDeps,
  assertion: string,
  clientId: string,
  jwks: { keys: JsonWebKey[] },
): Promise<{ exp: number; jti: string }> {
  let payload;
  try {
    ({ payload } = await jwtVerify(assertion, createLocalJWKSet({ keys: jwks.keys as JWK[] }), {
      algorithms: [...ASSERTION_SIGNING_ALGS],
      issuer: clientId,
      subject: clientId,
      audience: [issuer, tokenEndpoint],
      currentDate: new Date(clock.now()),
      clockTolerance: CLOCK_TOLERANCE_SECONDS,
      requiredClaims: ["exp", "jti"],
    }));
  } catch (error) {
    throw invalidClient(describeFailure(error));
  }
  const { exp, iat, jti } = payload;
  const nowSeconds = clock.now() / 1000;
  if (typeof exp !== "number" || exp > nowSeconds + MAX_ASSERTION_LIFETIME_SECONDS) {
    throw invalidClient(
      `The client assertion's exp is more than ${MAX_ASSERTION_LIFETIME_SECONDS} s ahead`,
    );
  }
  if (iat !== undefined && iat > nowSeconds + CLOCK_TOLERANCE_SECONDS) {
    throw invalidClient("The client assertion's iat is in the future");
  }
  if (typeof jti !== "string" || jti === "" || jti.length > MAX_JTI_LENGTH) {
    throw invalidClient(`The client assertion's jti must be 1 to ${MAX_JTI_LENGTH} characters`);
  }
  return { exp, jti };
}

/** What failed, named by the check, never with key material. */
function describeFailure(error: unknown): string {
  if (error instanceof errors.JWTExpired) return "The client assertion expired (exp)";
  if (error instanceof errors.JWTClaimValidationFailed) {
    return `The client assertion's ${error.claim} claim is not valid (${error.reason})`;
  }
  if (error instanceof errors.JWSSignatureVerificationFailed) {
    return "The client assertion's signature is not valid";
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return `The client assertion's alg is not accepted (use ${ASSERTION_SIGNING_ALGS.join(", ")})`;
  }
  if (error instanceof errors.JWKSNoMatchingKey) {
    return "No key registered for the client matches the assertion (kid, alg)";
  }
  if (error instanceof errors.JOSEError) return "The client assertion is malformed";
  throw error;
}
