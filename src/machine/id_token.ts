/**
 * A GitLab CI job's ID token checked as an RFC 7523 assertion: RS256 only (what GitLab signs
 * with), a key GitLab publishes, `iss` GitLab's, `aud` naming our issuer or our token endpoint,
 * `exp`, `iat` and `nbf` with a minute's leeway, and the claims a rule matches present. Every
 * failure names its check and never key material, the JWKS or the kids GitLab publishes.
 *
 * @see RFC 7523 §3, GitLab "OpenID Connect (OIDC) Authentication Using ID Tokens"
 */

import { compactVerify, decodeProtectedHeader, importJWK } from "jose";
import type { CiJob } from "./caller.ts";
import { type GitLabKeys, GitLabKeysUnavailable } from "./gitlab_keys.ts";

/** Leeway on `exp`, `iat` and `nbf`. */
export const ASSERTION_LEEWAY_SECONDS = 60;
/** The one algorithm GitLab signs ID tokens with. */
const ALGORITHM = "RS256";
/** The claims every ID token must carry: the list, and `sub` (RFC 7523 §3 item 2). */
const REQUIRED = [
  "exp",
  "iat",
  "jti",
  "iss",
  "aud",
  "sub",
  "project_path",
  "ref",
  "ref_type",
] as const;

/** Thrown when a check fails; the message names it (for `invalid_grant`'s description). */
export class AssertionRefused extends Error {
  override name = "AssertionRefused";
}

/** What the ID token must be, and when it is checked. */
export interface IdTokenExpectations {
  /** GITLAB_ISSUER, or GITLAB_URL without a trailing slash. */
  gitlabIssuer: string;
  /** Audiences accepted: our issuer and our token endpoint's URL. */
  audiences: readonly string[];
  nowMs: number;
}

/** A verified ID token: the job, its `jti` and `exp` (seconds), and who triggered it. */
export interface VerifiedIdToken {
  job: CiJob;
  jti: string;
  exp: number;
  userLogin?: string;
}

/** Checks `assertion`; throws AssertionRefused naming the failed check. */
export async function verifyIdToken(
  assertion: string,
  keys: GitLabKeys,
  expect: IdTokenExpectations,
): Promise<VerifiedIdToken> {
  const header = headerOf(assertion);
  if (header.alg !== ALGORITHM) throw new AssertionRefused("alg: only RS256 is accepted");
  if (typeof header.kid !== "string" || header.kid === "") {
    throw new AssertionRefused("kid: the assertion names no key");
  }
  const key = await publishedKey(keys, header.kid);
  const claims = await verifiedClaims(assertion, key);
  return checkClaims(claims, expect);
}

function headerOf(assertion: string): Record<string, unknown> {
  try {
    return decodeProtectedHeader(assertion) as Record<string, unknown>;
  } catch {
    throw new AssertionRefused("signature: the assertion is not a signed JWT");
  }
}

async function publishedKey(keys: GitLabKeys, kid: string) {
  try {
    const key = await keys.keyFor(kid);
    if (!key) throw new AssertionRefused("kid: GitLab publishes no key of this id");
    return await importJWK({ ...key, alg: ALGORITHM }, ALGORITHM);
  } catch (error) {
    if (error instanceof AssertionRefused) throw error;
    if (error instanceof GitLabKeysUnavailable) {
      throw new AssertionRefused("kid: GitLab's keys could not be read; try again later");
    }
    throw new AssertionRefused("kid: GitLab's key of this id is not usable");
  }
}

async function verifiedClaims(
  assertion: string,
  key: Awaited<ReturnType<typeof importJWK>>,
): Promise<Record<string, unknown>> {
  let payload: Uint8Array;
  try {
    payload = (await compactVerify(assertion, key, { algorithms: [ALGORITHM] })).payload;
  } catch {
    throw new AssertionRefused("signature: the assertion's signature is not valid");
  }
  try {
    const claims: unknown = JSON.parse(new TextDecoder().decode(payload));
    if (typeof claims === "object" && claims !== null && !Array.isArray(claims)) {
      return claims as Record<string, unknown>;
    }
  } catch {
    // Falls through to the refusal below.
  }
  throw new AssertionRefused("signature: the assertion's payload is not a JSON object");
}

function checkClaims(
  claims: Record<string, unknown>,
  expect: IdTokenExpectations,
): VerifiedIdToken {
  const missing = REQUIRED.find((name) => claims[name] === undefined || claims[name] === null);
  if (missing !== undefined) throw new AssertionRefused(`${missing}: the claim is missing`);
  const now = expect.nowMs / 1000;
  const { exp, iat, nbf, iss, aud, jti } = claims;
  if (iss !== expect.gitlabIssuer) throw new AssertionRefused("iss: not this service's GitLab");
  const audiences = Array.isArray(aud) ? aud : [aud];
  if (!audiences.some((entry) => expect.audiences.includes(entry as string))) {
    throw new AssertionRefused("aud: names neither this service nor its token endpoint");
  }
  if (typeof exp !== "number" || now > exp + ASSERTION_LEEWAY_SECONDS) {
    throw new AssertionRefused("exp: the assertion has expired");
  }
  if (typeof iat !== "number" || iat > now + ASSERTION_LEEWAY_SECONDS) {
    throw new AssertionRefused("iat: the assertion is issued in the future");
  }
  if (nbf !== undefined && (typeof nbf !== "number" || nbf > now + ASSERTION_LEEWAY_SECONDS)) {
    throw new AssertionRefused("nbf: the assertion is not valid yet");
  }
  if (typeof jti !== "string" || jti === "" || jti.length > 256) {
    throw new AssertionRefused("jti: must be a non-empty string");
  }
  const text = (name: string): string => {
    const value = claims[name];
    if (typeof value !== "string" || value === "" || value.length > 1024) {
      throw new AssertionRefused(`${name}: the claim must be a non-empty string`);
    }
    return value;
  };
  const optional = (name: string): string | undefined =>
    claims[name] === undefined ? undefined : text(name);
  return {
    job: {
      project_path: text("project_path"),
      project_id: optional("project_id"),
      namespace_id: optional("namespace_id"),
      ref: text("ref"),
      ref_type: text("ref_type"),
      ref_protected: optional("ref_protected"),
      environment: optional("environment"),
      pipeline: optional("pipeline_id"),
      job: optional("job_id"),
    },
    jti,
    exp,
    userLogin: optional("user_login"),
  };
}
