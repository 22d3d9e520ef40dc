/**
 * The providers the service can sign users in with, by the name UPSTREAM_PROVIDER gives. A new
 * provider is a description (`oauth_provider.ts`) in a module of this folder and one line here.
 */

import { GITLAB_PROVIDER } from "./gitlab.ts";
import type { ProviderDescription } from "./oauth_provider.ts";

/** Every provider, by name. */
export const PROVIDERS: Readonly<Record<string, ProviderDescription>> = {
  gitlab: GITLAB_PROVIDER,
};
