/**
 * The fixed endpoints and their rules: which need OAuth configuration (spec §1.7), which
 * rate-limit bucket each counts in, which answer CORS. In gateway mode the MCP resource path
 * (derived per request) is matched before these (see `mcp_gateway.ts`).
 */

import { OAUTH_CORS } from "../cors.ts";
import type { Routes } from "../router.ts";
import { handleAuthorize } from "./authorize.ts";
import { handleLiveness, handleReadiness } from "./health.ts";
import { handleHome } from "./home.ts";
import { handleAuthorizationServerMetadata, handleProtectedResourceMetadata } from "./metadata.ts";
import { handlePoll } from "./poll.ts";
import { handleRegister } from "./register.ts";
import { handleRevoke } from "./revoke.ts";
import { handleToken } from "./token.ts";

const authorizationServerMetadata = {
  methods: { GET: handleAuthorizationServerMetadata },
  cors: OAUTH_CORS,
};
const protectedResourceMetadata = {
  methods: { GET: handleProtectedResourceMetadata },
  cors: OAUTH_CORS,
};

/** Path → handlers and rules. */
export const ROUTES: Routes = {
  "/": { methods: { GET: handleHome } },
  "/healthz": { methods: { GET: handleLiveness } },
  "/readyz": { methods: { GET: handleReadiness } },
  "/authorize": { methods: { GET: handleAuthorize }, oauth: true, rateLimit: "authorize" },
  "/oauth/poll": {
    methods: { GET: handlePoll },
    oauth: true,
    bareNotConfigured: true,
    rateLimit: "poll",
  },
  "/token": { methods: { POST: handleToken }, oauth: true, rateLimit: "token", cors: OAUTH_CORS },
  "/register": {
    methods: { POST: handleRegister },
    oauth: true,
    rateLimit: "register",
    cors: OAUTH_CORS,
  },
  "/revoke": { methods: { POST: handleRevoke }, oauth: true, rateLimit: "token", cors: OAUTH_CORS },
  "/.well-known/oauth-authorization-server": authorizationServerMetadata,
  "/.well-known/oauth-authorization-server/*": authorizationServerMetadata,
  "/.well-known/oauth-protected-resource": protectedResourceMetadata,
  "/.well-known/oauth-protected-resource/*": protectedResourceMetadata,
};
