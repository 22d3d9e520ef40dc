/**
 * GitLab's CI ID tokens, simulated: an RS256 key published at `/oauth/discovery/keys` (as GitLab
 * does) and tokens signed with it carrying GitLab's claim names. The simulated GitLab serves the
 * keys over HTTP; the tests' in-process fake GitLab hands `serve` in as its fetch. A test may
 * rotate the key (a new kid) and count how often the keys were fetched.
 */

import { exportJWK, generateKeyPair, SignJWT } from "jose";

/** GitLab's ID-token claims (all strings but the times), as a job of acme/app on main gets. */
export function gitlabJobClaims(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    namespace_id: "72",
    namespace_path: "acme",
    project_id: "20",
    project_path: "acme/app",
    user_id: "1",
    user_login: "ada",
    user_email: "ada@example.com",
    pipeline_id: "1234",
    pipeline_source: "push",
    job_id: "5678",
    ref: "main",
    ref_type: "branch",
    ref_path: "refs/heads/main",
    ref_protected: "true",
    runner_id: "3",
    runner_environment: "gitlab-hosted",
    sha: "714a629c0b401fdce83e847fc9589983fc6f46bc",
    ...overrides,
  };
}

type KeyPair = Awaited<ReturnType<typeof generateKeyPair>>;

/** The keys the fake GitLab signs ID tokens with and publishes. */
export class FakeGitLabIdTokens {
  /** GitLab's issuer (GITLAB_URL without a trailing slash). */
  issuer: string;
  /** How many times the keys were fetched. */
  fetches = 0;
  /** While set, the keys URL answers 503, as a GitLab in trouble does. */
  unavailable = false;
  #pair?: Promise<KeyPair>;
  #kid = "gitlab-key-1";
  #generation = 1;

  constructor(issuer = "https://gitlab.com") {
    this.issuer = issuer;
  }

  #keys(): Promise<KeyPair> {
    return this.#pair ??= generateKeyPair("RS256", { extractable: true });
  }

  /** A new key (and kid) replaces the published one, as GitLab rotates. */
  rotate(): void {
    this.#generation++;
    this.#kid = `gitlab-key-${this.#generation}`;
    this.#pair = undefined;
  }

  /** The JWKS GitLab publishes. */
  async jwks(): Promise<{ keys: Record<string, unknown>[] }> {
    const jwk = await exportJWK((await this.#keys()).publicKey);
    return { keys: [{ ...jwk, kid: this.#kid, use: "sig", alg: "RS256" }] };
  }

  /** Answers GitLab's keys URL, as `fetch` would from GitLab; anything else is 404. */
  serve = async (input: string | URL | Request): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : input);
    if (url.pathname !== "/oauth/discovery/keys") return new Response(null, { status: 404 });
    this.fetches++;
    if (this.unavailable) return new Response(null, { status: 503 });
    return Response.json(await this.jwks());
  };

  /**
   * An ID token for `aud` (our issuer, as `id_tokens: aud:` names it) with `claims` over GitLab's
   * job claims; `exp` an hour from `nowMs`. `header` overrides the protected header.
   */
  async sign(
    aud: string | string[],
    nowMs: number,
    claims: Record<string, unknown> = {},
    header: Record<string, unknown> = {},
  ): Promise<string> {
    const iat = Math.floor(nowMs / 1000);
    return await new SignJWT({
      iss: this.issuer,
      aud,
      sub: "project_path:acme/app:ref_type:branch:ref:main",
      jti: crypto.randomUUID(),
      iat,
      nbf: iat - 5,
      exp: iat + 3600,
      ...gitlabJobClaims(),
      ...claims,
    }).setProtectedHeader({ alg: "RS256", typ: "JWT", kid: this.#kid, ...header })
      .sign((await this.#keys()).privateKey);
  }
}
