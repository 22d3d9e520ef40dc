/**
 * A second provider, "Forge", for tests only: a description (src/upstream/oauth_provider.ts) of a
 * generic RFC 8628 provider with GitHub's habits (its user API calls the username `login`), added
 * the way a new provider module is (a description chosen by UPSTREAM_PROVIDER). It proves that
 * nothing above src/upstream/ needs to know which provider signs users in.
 */

import type { OAuthQuirks } from "../src/upstream/oauth_http.ts";
import {
  type ProviderDescription,
  type ProviderEndpoints,
  userApiReader,
} from "../src/upstream/oauth_provider.ts";

/** Forge, with its endpoints below its URL and its quirks. */
export function forgeProvider(
  endpoints: ProviderEndpoints,
  quirks?: OAuthQuirks,
): ProviderDescription {
  return {
    displayName: "Forge",
    endpoints,
    processUser: userApiReader({ id: "id", username: "login" }),
    ...(quirks ? { quirks } : {}),
  };
}
