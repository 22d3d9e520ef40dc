/**
 * What a request says about where it was sent: its URL and, without BASE_URL, the base URL
 * (issuer). Deno builds `request.url` from the `Host` header, so a Host that is not a plain
 * `host[:port]` (`x/mcp?`, `a:99999`, `[::1`) would move the path or make the URL unparsable;
 * such a request, an absolute-form target that is not http(s) on such a host, or a trusted
 * proxy's malformed `X-Forwarded-Host`/`-Proto`, is refused with 400 before routing.
 *
 * @see RFC 9110 §7.2 (Host), RFC 9112 §3.2.2 (absolute-form), RFC 3986 §3.2.2–3.2.3, spec §2.6 (issuer from the request)
 */

import { rightmostForwarded } from "./client_ip.ts";
import { OAuthError } from "./errors.ts";
import { parseIpAddress } from "./ip_address.ts";

/** The request's URL and the service's base URL for it, without a trailing slash. */
export interface RequestOrigin {
  url: URL;
  baseUrl: string;
}

/** A DNS name or IPv4 address: letters, digits, `-`, `_`, `.`; at most 253 characters. */
const HOST_NAME = /^[a-z0-9_](?:[a-z0-9_.-]{0,252})$/i;
const PORT = /^[0-9]{1,5}$/;

/**
 * The URL and base URL of `request`; `fromTrustedProxy` when its socket peer is a TRUST_PROXY
 * proxy, whose forwarded host and scheme (right-most values) must then be well-formed. Throws a
 * 400 OAuthError for a malformed host, forwarded host or forwarded scheme.
 */
export type RequestOriginOf = (
  request: Request,
  baseUrl: string | undefined,
  fromTrustedProxy: boolean,
) => RequestOrigin;

/**
 * The RequestOriginOf of one app, remembering the last Host header and the last URL it found
 * well-formed: nearly every request names the same host, and an MCP client posts to one URL,
 * which then needs no second look (nor a second parse: the URL object is shared, see
 * RequestContext.url).
 */
export function createRequestOrigin(): RequestOriginOf {
  let lastGoodHost: string | undefined;
  let lastGood: { href: string; url: URL; origin: string } | undefined;
  return (request, baseUrl, fromTrustedProxy) => {
    const host = request.headers.get("host");
    if (host && host !== lastGoodHost) {
      requireHostAndPort("Host", host);
      lastGoodHost = host;
    }
    const href = request.url;
    // Whether a URL passes depends on it alone (its host is either the Host header checked just
    // above or checked by itself), so the same string passes again.
    if (lastGood?.href !== href) {
      const url = wellFormedUrl(href, host);
      lastGood = { href, url, origin: url.origin };
    }
    if (fromTrustedProxy) requireWellFormedForwarding(request.headers);
    return { url: lastGood.url, baseUrl: baseUrl ?? lastGood.origin };
  };
}

/** The URL of a request whose Host header (if any) is well-formed, if it is well-formed too. */
function wellFormedUrl(href: string, host: string | null): URL {
  let url: URL;
  try {
    url = new URL(href);
  } catch {
    throw malformed("The request's host is not a valid host[:port]");
  }
  if (url.username || url.password) throw malformed("The request's host has userinfo");
  requireHttpTarget(url, host);
  return url;
}

/**
 * A trusted proxy's forwarded host and scheme are checked, never used: TRUST_PROXY needs
 * BASE_URL (config.ts), so the issuer never follows a header a client may have chosen.
 */
function requireWellFormedForwarding(headers: Headers): void {
  const host = rightmostForwarded(headers, "x-forwarded-host");
  const proto = rightmostForwarded(headers, "x-forwarded-proto")?.toLowerCase();
  if (host !== undefined) {
    requireHostAndPort("X-Forwarded-Host", host);
    // A name the URL parser still refuses, such as `1.2.3.4.5` (it ends in a number).
    if (!URL.canParse(`http://${host}`)) {
      throw malformed("X-Forwarded-Host is not a valid host[:port]");
    }
  }
  if (proto !== undefined && proto !== "http" && proto !== "https") {
    throw malformed("X-Forwarded-Proto must be http or https");
  }
}

/**
 * An absolute-form request target (`GET ftp://evil/x HTTP/1.1`) replaces the Host header in the
 * URL Deno builds (RFC 9112 §3.2.2): it must be http(s), with a host under the Host header's
 * rules, or `ftp://evil` would become the issuer and `file:` URLs would fail deeper inside.
 */
function requireHttpTarget(url: URL, checkedHost: string | null): void {
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw malformed("The request target must be an http or https URL");
  }
  // The usual origin-form request: its URL's host is the Host header, checked just before.
  if (url.host === checkedHost) return;
  requireHostAndPort("The request target's host", url.host);
}

/** Throws unless `value` is a host name, an IPv4 address or a bracketed IPv6, with a port. */
function requireHostAndPort(header: string, value: string): void {
  const match = value.match(/^(\[[^\]]*\]|[^:]*)(?::(.*))?$/);
  const [, host, port] = match ?? [];
  const validHost = host !== undefined &&
    (host.startsWith("[")
      ? host.includes(":") && parseIpAddress(host.slice(1, -1)) !== undefined
      : HOST_NAME.test(host));
  const validPort = port === undefined ||
    (PORT.test(port) && Number(port) >= 1 && Number(port) <= 65535);
  if (!validHost || !validPort) {
    throw malformed(`${header} is not a valid host[:port]`);
  }
}

function malformed(description: string): OAuthError {
  return new OAuthError(400, "invalid_request", description);
}
