/**
 * Turns a validated configuration and the process's resources (KV, clock, logger) into the
 * app's dependencies. main.ts and the tests wire the service through this one function, so a
 * test app differs from production only in what it overrides (an in-memory KV, a fake clock,
 * a scripted upstream).
 */

import {
  type ClientMetadataFetcher,
  createClientMetadataFetcher,
} from "./client_metadata/fetcher.ts";
import type { Clock } from "./clock.ts";
import { type Config, jwtSecrets, oauthSettings } from "./config/mod.ts";
import type { AppDeps } from "./http/context.ts";
import type { Logger } from "./logger.ts";
import { createSecretBoxFromConfig } from "./secret_box.ts";
import { createVerifiedTokens } from "./gateway/verified_tokens.ts";
import { createConfiguredTokenSigner } from "./keys/token_signer.ts";
import { createConsentSigner } from "./sign_in/consent_signer.ts";
import { createStore } from "./store/mod.ts";
import type { Templates } from "./templates.ts";
import { createGitLabUpstream } from "./upstream/gitlab.ts";
import type { Upstream } from "./upstream/types.ts";

/**
 * What the process provides; `upstream` replaces the configured client and
 * `clientMetadataFetcher` the configured fetcher (tests, the demo).
 */
export interface Resources {
  kv: Deno.Kv;
  clock: Clock;
  logger: Logger;
  templates: Templates;
  upstream?: Upstream;
  clientMetadataFetcher?: ClientMetadataFetcher;
}

/** The app's dependencies; `oauth` only when GITLAB_CLIENT_ID and JWT_SECRET are both set. */
export function createAppDeps(config: Config, resources: Resources): AppDeps {
  const { kv, clock, logger, templates } = resources;
  const settings = oauthSettings(config);
  return {
    config,
    store: createStore(kv, clock, createSecretBoxFromConfig(config)),
    clock,
    templates,
    logger,
    verifiedTokens: createVerifiedTokens(),
    clientMetadataFetcher: resources.clientMetadataFetcher ??
      createClientMetadataFetcher({ allowPrivate: config.clientMetadataAllowPrivate }),
    oauth: settings && {
      upstream: resources.upstream ?? createGitLabUpstream({
        gitlabUrl: config.gitlabUrl,
        clientId: settings.gitlabClientId,
        clientSecret: config.gitlabClientSecret,
        scopes: config.gitlabScopes,
        timeoutMs: config.upstreamTimeoutMs,
        logger,
      }),
      signer: createConfiguredTokenSigner(config, jwtSecrets(settings, config)),
      consentSigner: createConsentSigner(jwtSecrets(settings, config)),
    },
  };
}
