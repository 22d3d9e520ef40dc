/**
 * Turns a validated configuration and the process's resources (KV, clock, logger) into the
 * app's dependencies. main.ts and the tests wire the service through this one function, so a
 * test app differs from production only in what it overrides (an in-memory KV, a fake clock,
 * a scripted upstream).
 */

import { mcpClientFor } from "../gateway/mcp_client/for_url.ts";
import { createServedSet, type ServedSet } from "../servers/served_set.ts";
import { DEFAULT_SERVER } from "../servers/file.ts";
import type { McpClient } from "../gateway/mcp_client/types.ts";
import {
  type ClientMetadataFetcher,
  createClientMetadataFetcher,
} from "../client_metadata/fetcher.ts";
import type { Clock } from "../clock.ts";
import { accessPolicyOf } from "../access/config.ts";
import { type Config, CONFIG_VARIABLES, ConfigError, oauthSettings } from "./config.ts";
import { jwtSecrets } from "../keys/config.ts";
import { requireMembershipScope } from "../upstream/config.ts";
import { type CallPolicy, policyGroups } from "../access/call_policy.ts";
import { createCallPolicyHolder } from "../access/call_policy_file.ts";
import { createMachineAccessHolder } from "../machine/holder.ts";
import { createGitLabKeys } from "../machine/gitlab_keys.ts";
import type { AppDeps } from "./context.ts";
import { DEFAULT_GRANT_TYPES, GRANT_TYPES, servedGrants } from "../grants/registry.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/catalog.ts";
import { createMetrics } from "./metrics.ts";
import { createSecretBoxFromConfig } from "../secret_box.ts";
import { createVerifiedTokens } from "../gateway/verified_tokens.ts";
import { createOpenStreams, endingStreamsWithSessions } from "../gateway/open_streams.ts";
import { createConfiguredTokenSigner } from "../keys/token_signer.ts";
import { createConsentSigner } from "../sign_in/consent_signer.ts";
import { createEventIds } from "../gateway/event_ids.ts";
import { createStore, type StoreDatabase } from "../store/mod.ts";
import type { Templates } from "../pages/mod.ts";
import {
  createOAuthProvider,
  type ProviderDescription,
  providerProfile,
} from "../upstream/oauth_provider.ts";
import { PROVIDERS } from "../upstream/providers.ts";
import { requireKnownRoles, rolesOf } from "./roles_config.ts";
import type { MisconfigurationHints } from "../upstream/oauth_http.ts";
import type { Upstream } from "../upstream/types.ts";

/**
 * What the process provides; `upstream` replaces the configured client (tests, the demo) and
 * `clientMetadataFetcher` the configured fetcher (main.ts, which knows the proxy variables; tests).
 */
export interface Resources {
  /** Deno KV, or another store backend (PostgreSQL). */
  kv: StoreDatabase;
  clock: Clock;
  logger: Logger;
  templates: Templates;
  upstream?: Upstream;
  clientMetadataFetcher?: ClientMetadataFetcher;
  /**
   * The providers UPSTREAM_PROVIDER chooses from; by default `src/upstream/providers.ts`'s
   * (a test adds one here as a new provider module would be added there).
   */
  providers?: Readonly<Record<string, ProviderDescription>>;
  /** Makes the client of a named MCP server (MCP_SERVERS_FILE); by default by its URL's scheme. */
  mcpClientFor?: (url: URL) => McpClient;
  /** Reaches the MCP server; by default the client for MCP_UPSTREAM_URL's scheme. */
  mcpClient?: McpClient;
  /** Reaches GitLab for its ID-token keys; by default `fetch` (a test hands in its fake GitLab). */
  gitlabFetch?: typeof fetch;
  /** Under `deno serve --parallel`: the workers' channel, so a scrape counts every worker. */
  metricsWorkers?: BroadcastChannel;
}

/** The app's dependencies; `oauth` only when GITLAB_CLIENT_ID and JWT_SECRET are both set. */
export function createAppDeps(config: Config, resources: Resources): AppDeps {
  const { kv, clock, logger, templates } = resources;
  const settings = oauthSettings(config);
  const metrics = createMetrics({
    clock,
    countLiveSessions: () => store.countLiveSessions(),
    takeOperatorRevocations: () => store.takeOperatorRevocations(),
    workers: resources.metricsWorkers,
  });
  const store = createStore(kv, clock, createSecretBoxFromConfig(config), {
    observeCommit: metrics.observeStoreCommit,
    timeoutMs: config.databaseTimeoutMs,
  });
  const openStreams = createOpenStreams({ store, clock, logger });
  const provider = configuredProvider(config, resources.providers);
  const roles = rolesOf(provider);
  requireKnownRoles(config, roles);
  const upstream = resources.upstream ??
    (settings && configuredUpstream(config, settings.gitlabClientId, logger, metrics, provider));
  if (upstream) requireMemberships(config, upstream);
  const servers = createServedSet({
    config,
    mcpClient: resources.mcpClient ??
      (config.mcpUpstreamUrl ? mcpClientFor(config.mcpUpstreamUrl) : undefined),
    clientFor: resources.mcpClientFor ?? ((url) => mcpClientFor(url)),
  }, config.mcpServersFile?.servers);
  const callPolicy = createCallPolicyHolder(
    config.mcpPolicyFile,
    (policy) => requireCallPolicyMemberships(config, policy, upstream),
    undefined,
    () => serversGroups(servers),
    accessPolicyOf(config),
    roles,
  );
  const initialPolicy = config.mcpPolicyFile?.policy;
  if (initialPolicy) requireCallPolicyMemberships(config, initialPolicy, upstream);
  for (const entry of config.mcpServersFile?.servers ?? []) {
    if (entry.policy) requireCallPolicyMemberships(config, entry.policy.policy, upstream);
  }
  return {
    config,
    store,
    clock,
    templates,
    logger,
    metrics,
    upstreamProfile: upstream?.profile ??
      providerProfile(provider, config.upstream.url, config.upstream.scopes),
    // A session that ends in this process ends its open streams at once.
    verifiedTokens: endingStreamsWithSessions(createVerifiedTokens(), openStreams),
    openStreams,
    clientMetadataFetcher: resources.clientMetadataFetcher ??
      createClientMetadataFetcher({ allowPrivate: config.clientMetadataAllowPrivate }),
    oauth: settings && upstream && {
      upstream,
      signer: createConfiguredTokenSigner(config, jwtSecrets(settings.jwtSecret, config)),
      consentSigner: createConsentSigner(jwtSecrets(settings.jwtSecret, config)),
      eventIds: createEventIds(jwtSecrets(settings.jwtSecret, config)),
    },
    callPolicy,
    servers,
    grants: servedGrants(config),
    grantTypes: { known: GRANT_TYPES, defaults: DEFAULT_GRANT_TYPES },
    gitlabKeys: createGitLabKeys({
      gitlabUrl: config.upstream.url,
      clock,
      timeoutMs: config.upstreamTimeoutMs,
      fetch: resources.gitlabFetch,
    }),
    machineAccess: createMachineAccessHolder(
      config.machineAccessFile,
      // A reload may name the servers served then (MCP_SERVERS_FILE reloads too).
      () => [DEFAULT_SERVER, ...servers.names()],
      { baseUrl: config.baseUrl },
    ),
  };
}

/** The groups the named servers' own policies (`policy_file`) and lists name, as served now. */
function serversGroups(servers: ServedSet): string[] {
  return servers.names().flatMap((name) => {
    const entry = servers.named(name)?.entry;
    return [
      ...(entry?.policy ? policyGroups(entry.policy.policy) : []),
      ...(entry?.lists?.groups.map((group) => group.path) ?? []),
    ];
  });
}

/** The provider UPSTREAM_PROVIDER names, among `providers`; throws ConfigError. */
export function configuredProvider(
  config: Config,
  providers: Readonly<Record<string, ProviderDescription>> = PROVIDERS,
): ProviderDescription {
  const name = config.upstream.provider;
  if (Object.hasOwn(providers, name)) return providers[name];
  throw new ConfigError(
    CONFIG_VARIABLES.upstream.provider.name,
    `no provider named ${name} (known: ${Object.keys(providers).join(", ")})`,
  );
}

/** The upstream the configuration describes, of `provider` (by default UPSTREAM_PROVIDER's). */
export function configuredUpstream(
  config: Config,
  clientId: string,
  logger: Logger,
  metrics?: Metrics,
  provider: ProviderDescription = configuredProvider(config),
): Upstream {
  const { url, scopes, clientSecret } = config.upstream;
  return createOAuthProvider(provider, {
    baseUrl: url,
    clientId,
    clientSecret,
    scopes,
    timeoutMs: config.upstreamTimeoutMs,
    logger,
    hints: misconfigurationHints(),
    observeCall: metrics?.observeGitLabCall,
  });
}

/** Group lists need an upstream that can tell memberships (GitLab can); start-up says so. */
function requireMemberships(config: Config, upstream: Upstream): void {
  if (accessPolicyOf(config).groups.length === 0 || upstream.membership) return;
  throw new ConfigError(
    CONFIG_VARIABLES.access.groups.name,
    `${upstream.profile.displayName} cannot tell group memberships; list users in ` +
      `${CONFIG_VARIABLES.access.users.name} instead`,
  );
}

/**
 * A policy naming groups needs their memberships, read at sign-in with the user's token: an
 * upstream that can tell them and a scope that lets it. Throws ConfigError.
 */
function requireCallPolicyMemberships(
  config: Config,
  policy: CallPolicy,
  upstream: Upstream | undefined,
): void {
  if (policyGroups(policy).length === 0) return;
  const name = CONFIG_VARIABLES.mcpPolicyFile.name;
  requireMembershipScope(config, name);
  if (upstream && !upstream.membership) {
    throw new ConfigError(
      name,
      `names groups, but ${upstream.profile.displayName} cannot tell group memberships`,
    );
  }
}

/** The variables an operator should check when the provider refuses our application. */
function misconfigurationHints(): MisconfigurationHints {
  const { clientId, clientSecret, scopes, url } = CONFIG_VARIABLES.upstream;
  return {
    client: `${clientId.name} and ${clientSecret.name}`,
    scopes: scopes.name,
    url: url.name,
  };
}
