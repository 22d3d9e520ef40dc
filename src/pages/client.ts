/**
 * What the pages say of the client asking to sign the user in: its name and who vouches for it,
 * or that it is unknown, and where the browser returns.
 */

import { UNSAFE_REDIRECT_SCHEMES } from "../clients/uri_schemes.ts";

/** The client as `/authorize` identified it. */
export interface ShownClient {
  clientId: string;
  /** Its name: from a metadata document (verified by `clientVerifiedHost`) or `/register`. */
  clientName?: string;
  /** The host of a metadata document client id, which vouches for the name. */
  clientVerifiedHost?: string;
  /** Whether the client id is registered here (RFC 7591): a nameless one is still known. */
  clientRegistered?: boolean;
}

/** The client's section slots: each non-empty one turns its line of the page on. */
export type ClientSlots = {
  clientId: string;
  clientName: string;
  /** The host vouching for the name. */
  verifiedHost: string;
  /** Set when the name is the client's own word. */
  unverifiedName: string;
  /**
   * Set when the client id is neither registered nor a metadata document: any app may send it,
   * and it must not read like a name.
   */
  unknownClient: string;
};

/** The slots for `client`. */
export function clientSlots(client: ShownClient): ClientSlots {
  const { clientId, clientName, clientVerifiedHost, clientRegistered } = client;
  return {
    clientId,
    clientName: clientName ?? "",
    verifiedHost: clientVerifiedHost ?? "",
    unverifiedName: clientName && !clientVerifiedHost ? "unverified" : "",
    unknownClient: !clientRegistered && !clientVerifiedHost && !clientName ? "unknown" : "",
  };
}

/**
 * What the user is told they return to: scheme and host of a web address
 * (`https://claude.ai`, `http://127.0.0.1:33418`); for any other scheme, that an app on this
 * device will get the code (`cursor://`), never a bare word that reads like a host.
 */
export function returnTarget(redirectUri: string): string {
  let url: URL;
  try {
    url = new URL(redirectUri);
  } catch {
    return redirectUri;
  }
  if (url.protocol === "https:" || url.protocol === "http:") return `${url.protocol}//${url.host}`;
  const scheme = redirectUri.slice(url.protocol.length).startsWith("//")
    ? `${url.protocol}//`
    : url.protocol;
  return UNSAFE_REDIRECT_SCHEMES.includes(url.protocol)
    ? `an address this page will not open (${scheme})`
    : `an app on this device (${scheme})`;
}
