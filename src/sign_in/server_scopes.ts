/**
 * The GitLab scopes of a sign-in: those of the MCP server it is for (`gitlab_scopes` in
 * MCP_SERVERS_FILE), else GITLAB_SCOPES. The pages show them, GitLab is asked for them, and the
 * GitLab token that server receives carries no more.
 */

import type { UpstreamProfile } from "../upstream/types.ts";
import type { SignInContext } from "./deps.ts";

/** The space-separated scopes a sign-in for `resource` asks GitLab for. */
export function scopesFor(ctx: SignInContext, resource: string | undefined): string {
  const url = resource === undefined || resource === "" ? null : URL.parse(resource);
  const own = url ? ctx.deps.servers.at(url, ctx.baseUrl)?.entry?.gitlabScopes : undefined;
  return own ?? ctx.oauth.upstream.profile.scopes;
}

/** The provider as the pages of a sign-in for `resource` present it: with its scopes. */
export function profileFor(ctx: SignInContext, resource: string | undefined): UpstreamProfile {
  return { ...ctx.oauth.upstream.profile, scopes: scopesFor(ctx, resource) };
}
