/**
 * `GET /.well-known/jwks.json`: the public keys access tokens are signed with (RFC 7517 §5),
 * for resource servers that verify them without our secret. Under HS256 there is nothing to
 * publish: an empty key set.
 */

import type { RequestContext } from "../http/request_context.ts";
import type { TokenSigner } from "../jwt.ts";
import { json } from "../http/responses.ts";

/** As long as a resource server may keep the set; rotation waits this long
 * (docs/resource-servers.md). */
export const JWKS_MAX_AGE_SECONDS = 300;

/** The public keys, never a private part. */
export function handleJwks(
  ctx: RequestContext<{ oauth?: { signer: Pick<TokenSigner, "publicKeys"> } }>,
): Promise<Response> {
  const keys = ctx.deps.oauth?.signer.publicKeys ?? [];
  return Promise.resolve(
    json({ keys }, 200, { "Cache-Control": `public, max-age=${JWKS_MAX_AGE_SECONDS}` }),
  );
}
