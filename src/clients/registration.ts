/**
 * Dynamic client registration metadata: validation of what a client sends, and redirect URI
 * matching for the opt-in `registered` policy.
 *
 * @see RFC 7591 §2 and §3.2.2, RFC 8252 §7.3 (loopback redirects), OAuth 2.1 §2.3.1
 */

import { OAuthError } from "../http/errors.ts";
import type { ClientMetadata } from "../store/records.ts";
import { parseUrl, parseWebUrl } from "../http/web_url.ts";
import { UNSAFE_REDIRECT_SCHEMES } from "./uri_schemes.ts";
import { DEVICE_CODE_GRANT_TYPE } from "../http/grant_types.ts";

const MAX_REDIRECT_URIS = 20;
const MAX_URI_LENGTH = 2000;
const MAX_TEXT_LENGTH = 500;
const MAX_CONTACTS = 5;
/** More than any list we support has distinct values; repeats beyond it are abuse. */
const MAX_LIST_ENTRIES = 10;
/** Host names of loopback redirect URIs, whose port may vary (RFC 8252 §7.3). */
export const LOOPBACK_HOSTS = ["127.0.0.1", "[::1]", "localhost"];
const TEXT_FIELDS = ["client_name", "scope", "software_id", "software_version"] as const;
const URL_FIELDS = ["client_uri", "logo_uri", "tos_uri", "policy_uri"] as const;

/** The token endpoint's grant types as registration sees them (src/grants/registry.ts says). */
export interface GrantTypes {
  /** Every grant type the service can serve. */
  known: readonly string[];
  /** What a registration that names none gets. */
  defaults: readonly string[];
}

/**
 * Validates registration metadata, `grant_types` among `grantTypes` (what the configuration
 * lets clients register), `defaults` when it names none; throws invalid_redirect_uri /
 * invalid_client_metadata. A client of the device grant only (RFC 8628) has no redirect URI to
 * register.
 */
export function parseClientMetadata(
  body: unknown,
  grantTypes: readonly string[],
  defaults: readonly string[],
): ClientMetadata {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalidMetadata("The registration request must be a JSON object");
  }
  const input = body as Record<string, unknown>;
  const grant_types = parseList(input, "grant_types", grantTypes) ?? [...defaults];
  const redirects = grant_types.includes("authorization_code");
  if (!redirects && !grant_types.includes(DEVICE_CODE_GRANT_TYPE)) {
    throw invalidMetadata(
      `grant_types must include authorization_code or ${DEVICE_CODE_GRANT_TYPE}`,
    );
  }
  const metadata: ClientMetadata = {
    redirect_uris: redirects || input.redirect_uris !== undefined
      ? parseRedirectUris(input.redirect_uris)
      : [],
    token_endpoint_auth_method: parseAuthMethod(input.token_endpoint_auth_method),
    grant_types,
    response_types: parseResponseTypes(input, redirects),
  };
  for (const field of TEXT_FIELDS) {
    const value = optionalText(input, field);
    if (value !== undefined) metadata[field] = value;
  }
  for (const field of URL_FIELDS) {
    const value = optionalText(input, field);
    if (value !== undefined) metadata[field] = requireWebUrl(field, value);
  }
  if (input.contacts !== undefined) {
    if (!isBoundedTextList(input.contacts, MAX_CONTACTS)) {
      throw invalidMetadata(
        `contacts must be an array of at most ${MAX_CONTACTS} strings of at most ${MAX_TEXT_LENGTH} characters`,
      );
    }
    metadata.contacts = input.contacts;
  }
  return metadata;
}

/**
 * Whether `requested` is one of the registered redirect URIs: exact string match, except that
 * for loopback URIs the port may differ (RFC 8252 §7.3: native apps pick a free port).
 */
export function matchesRegisteredRedirect(requested: string, registered: string[]): boolean {
  if (registered.includes(requested)) return true;
  const url = parseUrl(requested);
  if (!url || url.protocol !== "http:" || !LOOPBACK_HOSTS.includes(url.hostname)) return false;
  return registered.some((candidate) => {
    const other = parseUrl(candidate);
    if (!other) return false;
    url.port = "";
    other.port = "";
    return other.protocol === "http:" && other.href === url.href;
  });
}

function parseRedirectUris(value: unknown): string[] {
  if (!isStringArray(value) || value.length === 0) {
    throw invalidRedirect("redirect_uris must be a non-empty array of URIs");
  }
  if (value.length > MAX_REDIRECT_URIS) {
    throw invalidRedirect(`At most ${MAX_REDIRECT_URIS} redirect_uris are accepted`);
  }
  for (const uri of value) validateRedirectUri(uri);
  return value;
}

function validateRedirectUri(uri: string): void {
  if (uri.length > MAX_URI_LENGTH) throw invalidRedirect("A redirect URI is too long");
  const url = parseUrl(uri);
  if (!url) throw invalidRedirect(`Not an absolute URI: ${uri.slice(0, 100)}`);
  if (UNSAFE_REDIRECT_SCHEMES.includes(url.protocol)) {
    throw invalidRedirect(`The ${url.protocol} scheme is not allowed for redirect URIs`);
  }
  if (url.hash || uri.includes("#")) {
    throw invalidRedirect("Redirect URIs must not contain a fragment");
  }
  if (url.protocol === "http:" && !LOOPBACK_HOSTS.includes(url.hostname)) {
    throw invalidRedirect("http redirect URIs are allowed only for loopback hosts; use https");
  }
}

function parseAuthMethod(value: unknown): "none" {
  if (value === undefined || value === "none") return "none";
  throw invalidMetadata(
    "Only public clients are supported: token_endpoint_auth_method must be none",
  );
}

/**
 * `response_types`, consistent with `grant_types` (RFC 7591 §2.1): `code` exactly when the
 * client has the authorization_code grant. Omitted, it is `["code"]` for such a client and `[]`
 * for a device-only one (which uses no authorization endpoint); a contradiction is refused.
 */
function parseResponseTypes(input: Record<string, unknown>, authorizationCode: boolean): string[] {
  const listed = parseList(input, "response_types", ["code"]);
  if (listed === undefined) return authorizationCode ? ["code"] : [];
  if (authorizationCode && !listed.includes("code")) {
    throw invalidMetadata(
      "response_types must include code: grant_types includes authorization_code",
    );
  }
  if (!authorizationCode && listed.includes("code")) {
    throw invalidMetadata(
      "response_types code needs authorization_code in grant_types",
    );
  }
  return listed;
}

function parseList(
  input: Record<string, unknown>,
  field: string,
  supported: readonly string[],
): string[] | undefined {
  const value = input[field];
  if (value === undefined) return undefined;
  if (!isBoundedTextList(value, MAX_LIST_ENTRIES)) {
    throw invalidMetadata(`${field} must be an array of at most ${MAX_LIST_ENTRIES} strings`);
  }
  const unsupported = value.filter((item) => !supported.includes(item));
  if (unsupported.length > 0) {
    throw invalidMetadata(`Unsupported ${field}: ${unsupported.join(", ").slice(0, 200)}`);
  }
  return value;
}

function optionalText(input: Record<string, unknown>, field: string): string | undefined {
  const value = input[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" || value.length > MAX_TEXT_LENGTH) {
    throw invalidMetadata(`${field} must be a string of at most ${MAX_TEXT_LENGTH} characters`);
  }
  return value;
}

function requireWebUrl(field: string, value: string): string {
  if (!parseWebUrl(value)) throw invalidMetadata(`${field} must be an http(s) URL`);
  return value;
}

function isStringArray(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((item) => typeof item === "string");
}

function isBoundedTextList(value: unknown, maxEntries: number): value is string[] {
  return isStringArray(value) && value.length <= maxEntries &&
    value.every((item) => item.length <= MAX_TEXT_LENGTH);
}

function invalidRedirect(description: string): OAuthError {
  return new OAuthError(400, "invalid_redirect_uri", description);
}

function invalidMetadata(description: string): OAuthError {
  return new OAuthError(400, "invalid_client_metadata", description);
}
