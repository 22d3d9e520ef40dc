/**
 * The fixed endpoints and their rules: which need OAuth configuration (spec §1.7), which
 * rate-limit bucket each counts in, which answer CORS. In gateway mode the MCP resource path
 * (derived per request) is matched before these (see `gateway/proxy.ts`).
 */

import type { Config } from "./config.ts";
import { OAUTH_CORS } from "../http/cors.ts";
import { PATHS } from "../http/paths.ts";
import type { RequestContext } from "./context.ts";
import type { Handler, Methods, Routes } from "./router.ts";
import { handleAuthorize } from "../routes/authorize.ts";
import { handleCallback } from "../routes/callback.ts";
import { handleConsent } from "../routes/consent.ts";
import { handleLiveness, handleReadiness } from "../routes/health.ts";
import { handleHome } from "../routes/home.ts";
import { handleIntrospect } from "../routes/introspect.ts";
import { handleJwks } from "../routes/jwks.ts";
import { handleMetrics } from "../routes/metrics.ts";
import {
  handleAuthorizationServerMetadata,
  handleProtectedResourceMetadata,
} from "../routes/metadata.ts";
import { handlePoll } from "../routes/poll.ts";
import { handleRegister } from "../routes/register.ts";
import { handleRevoke } from "../routes/revoke.ts";
import { handleToken } from "../grants/token_endpoint.ts";
import { handleDeviceAuthorization } from "../routes/device_authorization.ts";
import { handleDevice, handleDeviceForm } from "../routes/device.ts";
import { deviceAuthorizationOn } from "../sign_in/device_authorization/config.ts";

/**
 * GET, and HEAD answered by the same handler: a document that changes nothing when read (RFC
 * 9110 §9.3.2). `Deno.serve` sends a HEAD answer's headers, its length included, never its body.
 * The GETs that start or advance a sign-in (/authorize, /oauth/poll, /device, the callback) stay
 * GET only: a link checker's HEAD must not start a GitLab flow.
 */
function readOnly(handler: Handler<RequestContext>): Methods<RequestContext> {
  return { GET: handler, HEAD: handler };
}

const authorizationServerMetadata = {
  methods: readOnly(handleAuthorizationServerMetadata),
  cors: OAUTH_CORS,
};
const protectedResourceMetadata = {
  methods: readOnly(handleProtectedResourceMetadata),
  cors: OAUTH_CORS,
};

const redirectSignIn = (config: Config) => config.upstream.signIn === "redirect";

/** Path → handlers and rules. */
export const ROUTES: Routes = {
  [PATHS.home]: { methods: readOnly(handleHome) },
  [PATHS.liveness]: { methods: readOnly(handleLiveness) },
  [PATHS.readiness]: { methods: readOnly(handleReadiness) },
  [PATHS.metrics]: { methods: readOnly(handleMetrics), when: (config) => !!config.metricsToken },
  [PATHS.authorize]: { methods: { GET: handleAuthorize }, oauth: true, rateLimit: "authorize" },
  [PATHS.poll]: {
    methods: { GET: handlePoll },
    oauth: true,
    bareNotConfigured: true,
    rateLimit: "poll",
  },
  // The redirect sign-in's (GITLAB_SIGN_IN=redirect only). They follow an /authorize, which
  // counts in its own bucket, as the page's polls do in device mode, so they count with those:
  // a sign-in costs one request of the authorize bucket in either mode.
  [PATHS.consent]: {
    methods: { POST: handleConsent },
    oauth: true,
    rateLimit: "poll",
    when: redirectSignIn,
  },
  [PATHS.callback]: {
    methods: { GET: handleCallback },
    oauth: true,
    rateLimit: "poll",
    when: redirectSignIn,
  },
  [PATHS.token]: {
    methods: { POST: handleToken },
    oauth: true,
    rateLimit: "token",
    cors: OAUTH_CORS,
  },
  // A device authorization starts a sign-in, so it counts with /authorize.
  [PATHS.deviceAuthorization]: {
    methods: { POST: handleDeviceAuthorization },
    oauth: true,
    rateLimit: "authorize",
    cors: OAUTH_CORS,
    when: deviceAuthorizationOn,
  },
  // Wrong user codes count in the `device` bucket, in the handler: right ones are not limited.
  [PATHS.device]: {
    methods: { GET: handleDevice, POST: handleDeviceForm },
    oauth: true,
    when: deviceAuthorizationOn,
  },
  [PATHS.register]: {
    methods: { POST: handleRegister },
    oauth: true,
    rateLimit: "register",
    cors: OAUTH_CORS,
  },
  [PATHS.revoke]: {
    methods: { POST: handleRevoke },
    oauth: true,
    rateLimit: "token",
    cors: OAUTH_CORS,
  },
  // Rate-limited in the handler: per authenticated caller, not per address.
  [PATHS.introspect]: {
    methods: { POST: handleIntrospect },
    oauth: true,
    when: (config) => config.introspectionTokens !== undefined,
  },
  [PATHS.jwks]: { methods: readOnly(handleJwks), cors: OAUTH_CORS },
  [PATHS.authorizationServerMetadata]: authorizationServerMetadata,
  [`${PATHS.authorizationServerMetadata}/*`]: authorizationServerMetadata,
  [PATHS.protectedResourceMetadata]: protectedResourceMetadata,
  [`${PATHS.protectedResourceMetadata}/*`]: protectedResourceMetadata,
};
