/**
 * The simulated GitLab's authorization codes (RFC 6749 §4.1 with PKCE, RFC 7636): issued when
 * a person approves on `/oauth/authorize`, single use, ten minutes, bound to the client, the
 * redirect URI and the code challenge they were issued for.
 */

import type { Clock } from "../../src/clock.ts";
import { randomToken, sha256Base64Url } from "../../src/crypto.ts";

/** What an authorization request asked, as the code remembers it. */
export interface AuthorizationRequest {
  clientId: string;
  redirectUri: string;
  scope: string;
  /** S256 challenge; empty when the request had no PKCE. */
  codeChallenge: string;
}

/** An issued code and what it grants. */
export interface AuthorizationCodeRecord extends AuthorizationRequest {
  userId: number;
  expiresAt: number;
}

/** What redeeming a code must repeat. */
export interface CodeRedemption {
  clientId: string;
  redirectUri: string;
  codeVerifier: string;
}

/** GitLab's authorization code lifetime. */
const CODE_TTL_MS = 10 * 60 * 1000;

/** The codes of one simulated GitLab. */
export interface AuthorizationCodes {
  /** Issues a code for an approved request. */
  issue(request: AuthorizationRequest, userId: number): string;
  /**
   * Redeems a code once: the record when client, redirect URI and PKCE verifier match and it is
   * live; undefined otherwise (the code is spent either way, as GitLab does).
   */
  redeem(code: string, redemption: CodeRedemption): AuthorizationCodeRecord | undefined;
}

/** An empty set of codes on `clock`. */
export function createAuthorizationCodes(clock: Clock): AuthorizationCodes {
  const codes = new Map<string, AuthorizationCodeRecord>();
  return {
    issue(request, userId) {
      const code = randomToken(24);
      codes.set(code, { ...request, userId, expiresAt: clock.now() + CODE_TTL_MS });
      return code;
    },
    redeem(code, { clientId, redirectUri, codeVerifier }) {
      const record = codes.get(code);
      codes.delete(code);
      if (!record || clock.now() >= record.expiresAt) return undefined;
      if (record.clientId !== clientId || record.redirectUri !== redirectUri) return undefined;
      if (record.codeChallenge !== "" && sha256Base64Url(codeVerifier) !== record.codeChallenge) {
        return undefined;
      }
      return record;
    },
  };
}
