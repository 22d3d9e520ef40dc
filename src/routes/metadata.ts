/**
 * Discovery documents: authorization server metadata (RFC 8414) and the protected resource
 * metadata of the MCP server this service protects (RFC 9728).
 */

import type { ServedSet } from "../servers/served_set.ts";
import type { IntrospectionConfig } from "../introspection/config.ts";
import type { KeysConfig } from "../keys/config.ts";
import type { RequestContext } from "../http/request_context.ts";
import { notFound } from "../http/errors.ts";
import type { UpstreamProfile } from "../upstream/types.ts";

/** What the discovery documents read: settings, and how the provider presents itself. */
interface MetadataDeps {
  config:
    & Pick<KeysConfig, "accessTokenAlg">
    & IntrospectionConfig
    & Pick<DeviceAuthorizationConfig, "deviceAuthorization">
    & ClientAuthSwitch
    & { baseUrl?: string };
  upstreamProfile: Pick<UpstreamProfile, "displayName">;
  /** The MCP servers served now: each has its protected resource metadata. */
  servers: Pick<ServedSet, "resources">;
  /** The grant types `POST /token` serves, in metadata's order. */
  grants: ServedGrants;
}
import { json, NO_STORE } from "../http/responses.ts";
import { pathOf, resourceAsRequested } from "../http/resource.ts";
import { PATHS } from "../http/paths.ts";
import { GRANTED_SCOPES } from "../scopes.ts";
import type { ServedGrants } from "../grants/registry.ts";
import {
  type DeviceAuthorizationConfig,
  deviceAuthorizationOn,
} from "../sign_in/device_authorization/config.ts";
import {
  clientAssertionAlgs,
  clientAuthMethodNames,
  type ClientAuthSwitch,
} from "../grants/client_auth/authenticate.ts";

const CACHEABLE = { "Cache-Control": "public, max-age=300" };

/**
 * Without BASE_URL the documents name whatever host the request named, so no cache may keep
 * one and hand it to a request for another host.
 */
function cachingOf(ctx: RequestContext<MetadataDeps>): HeadersInit {
  return ctx.deps.config.baseUrl ? CACHEABLE : NO_STORE;
}

/** Authorization server metadata. @see RFC 8414 §2, §3 (path-inserted well-known URI) */
export function handleAuthorizationServerMetadata(
  ctx: RequestContext<MetadataDeps>,
): Promise<Response> {
  const issuer = ctx.baseUrl;
  requireSuffix(ctx.url.pathname, PATHS.authorizationServerMetadata, pathOf(issuer));
  return Promise.resolve(json(
    {
      issuer,
      authorization_endpoint: `${issuer}${PATHS.authorize}`,
      token_endpoint: `${issuer}${PATHS.token}`,
      registration_endpoint: `${issuer}${PATHS.register}`,
      revocation_endpoint: `${issuer}${PATHS.revoke}`,
      response_types_supported: ["code"],
      response_modes_supported: ["query"],
      grant_types_supported: [...ctx.deps.grants.keys()],
      code_challenge_methods_supported: ["S256"],
      token_endpoint_auth_methods_supported: clientAuthMethodNames(ctx.deps.config),
      ...assertionAlgs(ctx.deps.config),
      revocation_endpoint_auth_methods_supported: ["none"],
      scopes_supported: [...GRANTED_SCOPES],
      authorization_response_iss_parameter_supported: true,
      client_id_metadata_document_supported: true,
      service_documentation: `${issuer}${PATHS.home}`,
      ...optionalEndpoints(ctx.deps.config, issuer),
    },
    200,
    cachingOf(ctx),
  ));
}

/** The algorithms of `private_key_jwt` assertions, while machine clients are served. */
function assertionAlgs(config: ClientAuthSwitch): Record<string, string[]> {
  const algs = clientAssertionAlgs(config);
  return algs ? { token_endpoint_auth_signing_alg_values_supported: algs } : {};
}

/**
 * The optional endpoints: the JWKS under ES256/EdDSA, introspection when it has callers, device
 * authorization unless DEVICE_AUTHORIZATION=off.
 */
function optionalEndpoints(
  config: MetadataDeps["config"],
  issuer: string,
): Record<string, string> {
  return {
    ...(config.accessTokenAlg === "HS256" ? {} : { jwks_uri: `${issuer}${PATHS.jwks}` }),
    ...(config.introspectionTokens === undefined
      ? {}
      : { introspection_endpoint: `${issuer}${PATHS.introspect}` }),
    ...(deviceAuthorizationOn(config)
      ? { device_authorization_endpoint: `${issuer}${PATHS.deviceAuthorization}` }
      : {}),
  };
}

/**
 * Protected resource metadata of an MCP server this service protects: `/mcp`'s at the well-known
 * path alone or with its path, a named server's (MCP_SERVERS_FILE) with `/mcp/<name>`.
 *
 * @see RFC 9728 §2, §3.1
 */
export function handleProtectedResourceMetadata(
  ctx: RequestContext<MetadataDeps>,
): Promise<Response> {
  const { upstreamProfile, servers } = ctx.deps;
  const [main, ...named] = servers.resources(ctx.baseUrl);
  const suffix = wellKnownSuffix(ctx.url.pathname, PATHS.protectedResourceMetadata);
  const resource = suffix === "" || suffix === pathOf(main)
    ? main
    : named.find((candidate) => pathOf(candidate) === suffix);
  if (resource === undefined) throw notFound(ctx.url.pathname);
  const name = resource === main ? "" : ` ${resource.slice(resource.lastIndexOf("/") + 1)}`;
  return Promise.resolve(json(
    {
      resource: suffix === "" ? resource : resourceAsRequested(resource, ctx.url.pathname),
      authorization_servers: [ctx.baseUrl],
      scopes_supported: [...GRANTED_SCOPES],
      bearer_methods_supported: ["header"],
      resource_name: `MCP server${name} (sign in with ${upstreamProfile.displayName})`,
    },
    200,
    cachingOf(ctx),
  ));
}

/** The well-known path alone, or with exactly the path of the thing it describes. */
function requireSuffix(pathname: string, wellKnown: string, expected: string): void {
  const suffix = wellKnownSuffix(pathname, wellKnown);
  if (suffix !== "" && suffix !== expected) throw notFound(pathname);
}

/**
 * What follows the well-known path, without trailing slashes. The documents live at the root
 * only (RFC 8414 §3.1, RFC 9728 §3.1): under BASE_URL's path, where the other endpoints also
 * answer, there is none.
 */
function wellKnownSuffix(pathname: string, wellKnown: string): string {
  if (!pathname.startsWith(wellKnown)) throw notFound(pathname);
  return pathname.slice(wellKnown.length).replace(/\/+$/, "");
}
