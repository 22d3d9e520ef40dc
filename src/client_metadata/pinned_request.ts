/**
 * An https `GET` that connects only to addresses the SSRF guard checked, not to what a second
 * lookup of the name answers (DNS rebinding: a name answering a public address to the check and
 * a private one a moment later). `node:https` connects through a `lookup` that answers the
 * checked addresses and nothing else, and still verifies the certificate for the URL's host name
 * (SNI too). Deno's `fetch` has no such hook: its HttpClient can be sent to a proxy or a socket,
 * but then speaks plain HTTP to it.
 *
 * @see draft-ietf-oauth-client-id-metadata-document §6 (server-side request forgery)
 */

import { request } from "node:https";
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { LookupAddress } from "node:dns";
import type { LookupFunction } from "node:net";

/** What the request is, where it may connect, and how long it may take. */
export interface PinnedGet {
  url: URL;
  /** The checked addresses of the URL's host, in the order to try them. */
  addresses: readonly string[];
  headers: Record<string, string>;
  signal: AbortSignal;
  /** Root certificates trusted instead of the bundled ones (tests). */
  caCerts?: string[];
}

/** The answer as a fetch Response; rejects when no answer came (or `signal` aborted). */
export function getPinned(options: PinnedGet): Promise<Response> {
  const { url, signal } = options;
  const host = url.hostname.replace(/^\[|\]$/g, "");
  return new Promise((resolve, reject) => {
    const outgoing = request({
      host,
      port: url.port === "" ? 443 : Number(url.port),
      path: `${url.pathname}${url.search}`,
      method: "GET",
      headers: options.headers,
      // A connection of its own: none pooled for a name that resolved elsewhere before.
      agent: false,
      lookup: pinnedLookup(host, options.addresses),
      ...(options.caCerts ? { ca: options.caCerts } : {}),
    }, (incoming) => {
      try {
        resolve(responseOf(incoming));
      } catch (error) {
        // A status a Response cannot carry (below 200, above 599): no usable answer.
        incoming.destroy();
        reject(error);
      }
    });
    const abort = () => outgoing.destroy(new Error("aborted"));
    if (signal.aborted) abort();
    signal.addEventListener("abort", abort, { once: true });
    outgoing.on("error", reject);
    outgoing.on("close", () => signal.removeEventListener("abort", abort));
    outgoing.end();
  });
}

/** A `lookup` that answers `host` with `addresses`, and anything else with an error. */
function pinnedLookup(host: string, addresses: readonly string[]): LookupFunction {
  const answers: LookupAddress[] = addresses.map((address) => ({
    address,
    family: address.includes(":") ? 6 : 4,
  }));
  return (hostname, options, callback) => {
    if (hostname !== host || answers.length === 0) {
      callback(new Error(`no checked address for ${hostname}`), "", 0);
    } else if (options.all) callback(null, answers);
    else callback(null, answers[0].address, answers[0].family);
  };
}

function responseOf(incoming: IncomingMessage): Response {
  const status = incoming.statusCode ?? 0;
  const nullBody = [101, 204, 205, 304].includes(status);
  if (nullBody) incoming.resume();
  // Errors of the body reach its reader; without a listener they would be thrown.
  incoming.on("error", () => {});
  return new Response(
    nullBody ? null : ReadableStream.from(incoming) as ReadableStream<Uint8Array<ArrayBuffer>>,
    { status, headers: headersOf(incoming.headers) },
  );
}

function headersOf(incoming: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(incoming)) {
    for (const one of Array.isArray(value) ? value : value === undefined ? [] : [value]) {
      headers.append(name, one);
    }
  }
  return headers;
}
