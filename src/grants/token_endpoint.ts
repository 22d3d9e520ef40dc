/**
 * `POST /token`: reads the form, authenticates the client and hands the request to the grant
 * its `grant_type` names (`src/grants/`); the answer is the grant's tokens, never cached, and
 * what was issued goes on the request's one log line.
 *
 * @see spec §4.3, RFC 6749 §3.2 and §5
 */

import type { CallPolicyHolder } from "../access/call_policy_file.ts";
import type { RequestContext } from "../http/request_context.ts";
import type { Metrics } from "../metrics/catalog.ts";
import { authenticateClient, type ClientAuthDeps } from "./client_auth/authenticate.ts";
import { PATHS } from "../http/paths.ts";
import { clientRuleFor } from "../machine/rules.ts";
import type { MachineAccessHolder } from "../machine/holder.ts";
import type { GrantDeps, Issued } from "./grant.ts";
import type { ServedGrants } from "./registry.ts";
import { OAuthError } from "../http/errors.ts";
import { readParams, withValues } from "../http/params.ts";
import { json, NO_STORE } from "../http/responses.ts";
import type { ServedSet } from "../servers/served_set.ts";

/** What the token endpoint uses: what its grants use, and the policy file's groups. */
type TokenContext =
  & RequestContext<
    & Omit<
      GrantDeps,
      | "signer"
      | "upstream"
      | "accessRules"
      | "servedResources"
      | "serverLists"
      | "metrics"
      | "machineClientRule"
    >
    & {
      /** The grants the configuration serves. */
      grants: ServedGrants;
      callPolicy: CallPolicyHolder;
      servers: Pick<ServedSet, "resources" | "at">;
      machineAccess: MachineAccessHolder;
      metrics: Pick<Metrics, "refreshReplays" | "deviceAuthorizations" | "countGrant">;
      config: { requestBodyTimeoutMs: number };
    }
  >
  & { oauth: Pick<GrantDeps, "signer" | "upstream"> };

/** Handles `POST /token`. */
export async function handleToken(ctx: TokenContext): Promise<Response> {
  const params = withValues(await readParams(ctx.request, ctx.deps.config.requestBodyTimeoutMs));
  const grantType = params.get("grant_type");
  const grant = grantType === undefined ? undefined : ctx.deps.grants.get(grantType);
  return await ctx.deps.metrics.countGrant(grant?.type, async () => {
    if (grant === undefined) throw unsupportedGrantType(grantType);
    const client = await authenticateClient(
      clientAuthDeps(ctx),
      ctx.deps.config,
      ctx.request,
      params,
    );
    const issued = await grant.issue(grantDeps(ctx), {
      params,
      client,
      issuer: ctx.baseUrl,
      requestId: ctx.requestId,
    });
    return issuedResponse(ctx, grant.type, issued);
  });
}

function unsupportedGrantType(grantType: string | undefined): OAuthError {
  return new OAuthError(
    400,
    "unsupported_grant_type",
    grantType ? `Grant type ${grantType} is not supported` : "Missing grant_type is not supported",
  );
}

/** What client authentication reads. */
function clientAuthDeps(ctx: TokenContext): ClientAuthDeps {
  const { store, clock } = ctx.deps;
  return { store, clock, issuer: ctx.baseUrl, tokenEndpoint: `${ctx.baseUrl}${PATHS.token}` };
}

/** The service's parts the grants use. */
function grantDeps(ctx: TokenContext): GrantDeps {
  const { store, clock, config, logger, metrics, verifiedTokens, callPolicy, servers } = ctx.deps;
  const { machineAccess, gitlabKeys } = ctx.deps;
  return {
    store,
    clock,
    config,
    logger,
    metrics,
    verifiedTokens,
    signer: ctx.oauth.signer,
    upstream: ctx.oauth.upstream,
    accessRules: () => callPolicy.rules,
    machineAccess,
    gitlabKeys,
    servedResources: (issuer) => servers.resources(issuer),
    serverLists: (resource, issuer) => {
      const url = resource === undefined ? null : URL.parse(resource);
      return url ? servers.at(url, issuer)?.entry?.lists : undefined;
    },
    machineClientRule(clientId) {
      const access = ctx.deps.machineAccess.current();
      return access && clientRuleFor(access, clientId);
    },
  };
}

/**
 * The token response; what was issued goes on the request's log line (one line per request,
 * even under load).
 */
function issuedResponse(ctx: TokenContext, grant: string, issued: Issued): Response {
  const { subject } = issued;
  Object.assign(ctx.logFields, {
    grant,
    ...(subject.kind === "user" ? { sessionId: subject.sessionId, caller: "user" } : {}),
    clientId: subject.clientId,
    ...issued.logFields,
  });
  return json(issued.body, 200, NO_STORE);
}
