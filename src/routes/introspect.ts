/**
 * `POST /introspect` (RFC 7662), for resource servers that want revocation to count at once:
 * exists only with INTROSPECTION_TOKENS, answers only callers presenting one of them as a
 * Bearer credential, and counts each caller's requests against RATE_LIMIT_INTROSPECT.
 *
 * @see RFC 7662 §2
 */

import { bearerToken } from "../http/bearer_token.ts";
import type { IntrospectionConfig } from "../introspection/config.ts";
import type { TokenSigner } from "../jwt.ts";
import type { RequestContext } from "../http/request_context.ts";
import type { RateLimitDeps } from "../http/rate_limit.ts";
import type { IntrospectDeps } from "../introspection/introspect.ts";
import { OAuthError } from "../http/errors.ts";
import { readParams } from "../http/params.ts";
import { enforceRateLimit, enforceSubjectRateLimit } from "../http/rate_limit.ts";
import { json, NO_STORE } from "../http/responses.ts";
import { createCallerCheck } from "../introspection/callers.ts";
import { introspect } from "../introspection/introspect.ts";

/** What introspection uses: its callers, its rate limit, the sessions and the signer. */
type IntrospectContext =
  & RequestContext<
    & RateLimitDeps<"introspect">
    & Pick<IntrospectDeps, "store" | "clock">
    & { config: IntrospectionConfig & { requestBodyTimeoutMs: number } }
  >
  & { oauth: { signer: TokenSigner } };

/** Introspects the form's `token`; `token_type_hint` is accepted and not needed. */
export async function handleIntrospect(ctx: IntrospectContext): Promise<Response> {
  const { deps } = ctx;
  const presented = bearerToken(ctx.request.headers.get("authorization"));
  const caller = presented ? authenticatedCaller(ctx, presented) : undefined;
  if (caller === undefined) {
    // Guessing at credentials counts against the guesser's address.
    await enforceRateLimit(deps, "introspect", ctx.limitedClient());
    // RFC 6750 §3.1: a request without a bearer credential gets no error code in the challenge.
    const error = presented === undefined ? "" : ', error="invalid_token"';
    throw new OAuthError(
      401,
      "invalid_token",
      "Introspection needs one of INTROSPECTION_TOKENS as Bearer",
      { "WWW-Authenticate": `Bearer realm="introspection"${error}` },
    );
  }
  await enforceSubjectRateLimit(deps, "introspect", `caller:${caller}`);
  const params = await readParams(ctx.request, deps.config.requestBodyTimeoutMs);
  const token = params.get("token");
  if (token === undefined || token === "") {
    throw new OAuthError(400, "invalid_request", "Missing token");
  }
  const answer = await introspect(
    { signer: ctx.oauth.signer, store: deps.store, clock: deps.clock },
    token,
  );
  return json(answer, 200, NO_STORE);
}

function authenticatedCaller(ctx: IntrospectContext, presented: string): string | undefined {
  return createCallerCheck(ctx.deps.config.introspectionTokens ?? [])(presented);
}
