/**
 * What signing in uses of the service, named once for the device flow, the redirect sign-in,
 * admission and completion, and the endpoints that drive them (`/authorize`, `/oauth/poll`,
 * `/oauth/callback`, `/oauth/consent`). The app hands the whole service, which has them all.
 */

import type { CallPolicyHolder } from "../access/call_policy_file.ts";
import type { AccessConfig } from "../access/config.ts";
import type { ClientMetadataFetcher } from "../client_metadata/fetcher.ts";
import type { ClientsConfig } from "../clients/config.ts";
import type { Clock } from "../clock.ts";
import type { ServedSet } from "../servers/served_set.ts";
import type { RateLimit } from "../http/rate_limit.ts";
import type { RequestContext } from "../http/request_context.ts";
import type { EndDeps } from "../session/end.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/catalog.ts";
import type { Templates } from "../pages/mod.ts";
import type { SessionConfig } from "../session/config.ts";
import type { Store } from "../store/mod.ts";
import type { UpstreamConfig } from "../upstream/config.ts";
import type { Upstream, UpstreamProfile } from "../upstream/types.ts";
import type { SignInConfig } from "./config.ts";
import type { GrantTypes } from "../clients/registration.ts";
import type { DeviceAuthorizationConfig } from "./device_authorization/config.ts";
import type { ConsentSigner } from "./consent_signer.ts";

/** The settings signing in reads. */
export type SignInSettings =
  & UpstreamConfig
  & AccessConfig
  & SessionConfig
  & ClientsConfig
  & SignInConfig
  & DeviceAuthorizationConfig
  & {
    baseUrl?: string;
    requestBodyTimeoutMs: number;
    rateLimits: { authorize?: RateLimit; poll?: RateLimit; device?: RateLimit };
  };

/** The parts of the service signing in uses. */
export interface SignInDeps {
  config: SignInSettings;
  store: Store;
  clock: Clock;
  logger: Logger;
  metrics: Pick<
    Metrics,
    "signInsStarted" | "signInsFinished" | "deviceAuthorizations" | "rateLimitRefusals"
  >;
  templates: Templates;
  /** The policy file's groups are learnt at sign-in too. */
  callPolicy: CallPolicyHolder;
  /** The MCP servers served now: a sign-in is for one of them. */
  servers: Pick<ServedSet, "resources" | "at">;
  clientMetadataFetcher: ClientMetadataFetcher;
  /** The token endpoint's grant types, as a client's registration or document reads them. */
  grantTypes: GrantTypes;
  upstreamProfile: UpstreamProfile;
  /** Ending an abandoned sign-in's session forgets its tokens here too. */
  verifiedTokens: EndDeps["verifiedTokens"];
}

/** What exists only once OAuth is configured: the provider, and the consents' signer. */
export interface SignInOAuth {
  upstream: Upstream;
  consentSigner: ConsentSigner;
}

/** A request to a sign-in endpoint, before OAuth configuration is known. */
export type SignInRequestContext = RequestContext<SignInDeps>;

/** A request to a sign-in endpoint of a configured service. */
export type SignInContext = SignInRequestContext & { oauth: SignInOAuth };
