/**
 * The JWT bearer grant (RFC 7523 §2.1) for GitLab CI jobs: the job's GitLab ID token is the
 * credential (no client secret; a `client_id` sent is ignored). The token is checked
 * (id_token.ts), the first MACHINE_ACCESS_FILE `ci:` rule its claims match admits it and the
 * resource asked for, its `jti` is used once (last, so a request refused for what it asks leaves
 * the job's token usable), and the access token (`sub` `ci:<project_path>`, no refresh token) is for one
 * of the rule's servers and lives no longer than the ID token.
 *
 * @see docs/gateway.md "GitLab CI jobs" and "Machine callers"
 */

import { OAuthError } from "../http/errors.ts";
import { PATHS } from "../http/paths.ts";
import { machineSubject } from "../jwt.ts";
import { ciTokenClaims } from "../machine/caller.ts";
import { gitlabIssuerOf } from "../machine/config.ts";
import { ASSERTION_LEEWAY_SECONDS, AssertionRefused, verifyIdToken } from "../machine/id_token.ts";
import { ciRuleFor } from "../machine/rules.ts";
import { grantedScope, issueMachineToken, machineResource } from "../machine/token.ts";
import type { Grant, GrantDeps, GrantRequest, Issued } from "./grant.ts";
import { invalidGrant } from "./session_checks.ts";

/** The grant's `grant_type` (RFC 7523 §2.1). */
export const JWT_BEARER_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/** The largest assertion read: a GitLab ID token is a few kilobytes. */
const MAX_ASSERTION_CHARS = 16 * 1024;

/** The grant's module: served only with MACHINE_ACCESS_FILE. */
export const JWT_BEARER_GRANT: Grant = {
  type: JWT_BEARER_GRANT_TYPE,
  registrable: false,
  enabled: (config) => config.machineAccessFile !== undefined,
  issue: issueForCiJob,
};

async function issueForCiJob(deps: GrantDeps, request: GrantRequest): Promise<Issued> {
  const assertion = request.params.get("assertion");
  if (!assertion) throw new OAuthError(400, "invalid_request", "assertion is required");
  if (assertion.length > MAX_ASSERTION_CHARS) throw invalidGrant("The assertion is too large");
  // Before the jti is spent: a request refused for its scope may be sent again.
  const scope = grantedScope(request.params.get("scope"));
  const access = deps.machineAccess.current();
  if (!access) throw new OAuthError(400, "unsupported_grant_type", "No machine access file");
  const now = deps.clock.now();
  let verified;
  try {
    verified = await verifyIdToken(assertion, deps.gitlabKeys, {
      gitlabIssuer: gitlabIssuerOf(deps.config),
      audiences: [request.issuer, `${request.issuer}${PATHS.token}`],
      nowMs: now,
    });
  } catch (error) {
    if (!(error instanceof AssertionRefused)) throw error;
    throw invalidGrant(error.message);
  }
  const { job } = verified;
  const rule = ciRuleFor(access, job);
  if (!rule) {
    deps.logger.warn("CI job refused: no rule admits it", {
      requestId: request.requestId,
      ciProject: job.project_path,
      ciProjectId: job.project_id,
      ref: job.ref,
    });
    throw invalidGrant(`no rule admits ${job.project_path} at ref ${job.ref}`);
  }
  // The jti is spent last: a request refused for what it asks (its resource) may be sent again
  // with the job's one ID token.
  const resource = machineResource(
    deps.servedResources(request.issuer),
    request.params.get("resource"),
    rule,
  );
  const keepUntil = (verified.exp + ASSERTION_LEEWAY_SECONDS) * 1000;
  if (!await deps.store.spendAssertionId(gitlabIssuerOf(deps.config), verified.jti, keepUntil)) {
    throw invalidGrant("jti: the assertion was used already");
  }
  const subject = machineSubject("ci", job.project_path);
  const body = await issueMachineToken(deps, {
    subject,
    clientId: subject,
    issuer: request.issuer,
    requestedResource: resource,
    grant: rule,
    maxTtlSeconds: verified.exp - Math.floor(now / 1000),
    scope,
    claims: { ...ciTokenClaims(job), gitlab_user: verified.userLogin },
  });
  return {
    body,
    subject: { kind: "client", clientId: subject },
    logFields: {
      caller: "ci",
      ciProject: job.project_path,
      ciProjectId: job.project_id,
      ciPipeline: job.pipeline,
      ciJob: job.job,
      ciRule: rule.where,
    },
  };
}
