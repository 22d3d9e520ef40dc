/**
 * Fetches a Client ID Metadata Document with the limits the service promises: `GET` with
 * `Accept: application/json`, 5 seconds for everything (name resolution included), at most
 * 5 KiB, no redirect followed, only a 200 served as `application/json` (or `application/…+json`),
 * and, unless CLIENT_METADATA_ALLOW_PRIVATE is set, only from a host whose every address is
 * public, checked before connecting, and connected to at one of the addresses checked
 * (pinned_request.ts), never at what the name answers to a second lookup (DNS rebinding).
 *
 * Where the runtime sends https through a proxy (HTTPS_PROXY, ALL_PROXY; a host NO_PROXY does
 * not exempt), the proxy connects, not this process: the document is fetched through it with `fetch`, after the same check, and
 * which address the proxy reaches is the proxy's to restrict. docs/mcp-clients.md "Client ID
 * Metadata Documents" says so.
 *
 * @see draft-ietf-oauth-client-id-metadata-document §4 and §6
 */

import { isIpLiteral, isPublicAddress } from "./address.ts";
import { ClientMetadataError } from "./document.ts";
import { getPinned } from "./pinned_request.ts";

/** What a fetch brought back: the body and how long it may be cached (Cache-Control). */
export interface FetchedDocument {
  body: string;
  /** `max-age` in seconds, 0 for `no-store` / `no-cache`; undefined when the header says none. */
  maxAgeSeconds?: number;
}

/** Fetches a metadata document; throws ClientMetadataError naming the problem. */
export interface ClientMetadataFetcher {
  fetchDocument(url: URL): Promise<FetchedDocument>;
}

/** Resolves a name to addresses of one record type (Deno.resolveDns's shape). */
export type ResolveAddresses = (
  hostname: string,
  type: "A" | "AAAA",
  options: { signal: AbortSignal },
) => Promise<string[]>;

/** How a fetcher is built. */
export interface FetcherOptions {
  /** Lifts the SSRF guard (CLIENT_METADATA_ALLOW_PRIVATE). */
  allowPrivate: boolean;
  /** Default 5000. */
  timeoutMs?: number;
  /** Default 5120. */
  maxBytes?: number;
  /** Default `Deno.resolveDns`. */
  resolve?: ResolveAddresses;
  /** An HTTP client with other trusted CAs (tests); default Deno's. */
  httpClient?: Deno.HttpClient;
  /**
   * Whether the runtime's `fetch` sends a request for this URL through a proxy (`httpsProxyFor`):
   * the guarded fetch goes through it too, rather than connecting to the checked address itself.
   */
  viaProxy?: (url: URL) => boolean;
  /** Root certificates the guarded (pinned) fetch trusts instead of the bundled ones (tests). */
  caCerts?: string[];
  /** Which resolved addresses may be connected to; default public unicast only (tests). */
  isAllowedAddress?: (address: string) => boolean;
}

/**
 * What `fetch` would send, but the body uncompressed: node:https decodes no gzip (a document
 * sent compressed anyway is not UTF-8 JSON, and refused).
 */
const PINNED_HEADERS = {
  Accept: "application/json",
  "Accept-Encoding": "identity",
  "User-Agent": `Deno/${Deno.version.deno}`,
};

/** The limits of the issue: 5 s and 5 KiB. */
export const FETCH_TIMEOUT_MS = 5_000;
export const MAX_DOCUMENT_BYTES = 5 * 1024;

/** The fetcher the service uses. */
export function createClientMetadataFetcher(options: FetcherOptions): ClientMetadataFetcher {
  const timeoutMs = options.timeoutMs ?? FETCH_TIMEOUT_MS;
  const maxBytes = options.maxBytes ?? MAX_DOCUMENT_BYTES;
  const resolve = options.resolve ?? resolveWithDeno;
  const isAllowed = options.isAllowedAddress ?? isPublicAddress;
  const caCerts = options.caCerts ? { caCerts: options.caCerts } : {};
  return {
    async fetchDocument(url) {
      const signal = AbortSignal.timeout(timeoutMs);
      try {
        const addresses = options.allowPrivate
          ? undefined
          : await requirePublicHost(url.hostname, resolve, signal, isAllowed);
        const response = addresses === undefined || options.viaProxy?.(url)
          ? await fetch(url, {
            method: "GET",
            headers: { Accept: "application/json" },
            redirect: "manual",
            signal,
            ...(options.httpClient ? { client: options.httpClient } : {}),
          })
          : await getPinned({ url, addresses, headers: PINNED_HEADERS, signal, ...caCerts });
        return await readDocument(response, maxBytes);
      } catch (error) {
        if (error instanceof ClientMetadataError) throw error;
        if (signal.aborted) {
          throw new ClientMetadataError(`the document did not arrive within ${timeoutMs} ms`);
        }
        throw new ClientMetadataError("the document could not be fetched");
      }
    },
  };
}

/** The variables that send Deno's `fetch` to a proxy for an `https:` URL. */
const HTTPS_PROXY_VARIABLES = ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"];

/**
 * Whether `env` sends the runtime's https request for a URL through a proxy (see `viaProxy`): a
 * proxy variable is set and NO_PROXY does not exempt the URL's host, read as Deno reads it. A
 * host it exempts is connected to by `fetch` itself, after a lookup of its own: the pinned fetch
 * is the one that keeps to the checked addresses there.
 */
export function httpsProxyFor(
  env: Readonly<Record<string, string | undefined>>,
): (url: URL) => boolean {
  if (!HTTPS_PROXY_VARIABLES.some((name) => (env[name] ?? "").trim() !== "")) return () => false;
  // NO_PROXY when set, even empty, else no_proxy; entries split on commas, trimmed.
  const exempt = (env.NO_PROXY ?? env.no_proxy ?? "").split(",").map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  return (url) => !exempt.some((entry) => exempts(entry, url.hostname));
}

/** `*`, the host itself, or a domain the host is in (`example.com` or `.example.com`). */
function exempts(entry: string, host: string): boolean {
  if (entry === "*") return true;
  const domain = entry.replace(/^\./, "");
  return host === domain || host.endsWith(`.${domain}`);
}

function resolveWithDeno(
  hostname: string,
  type: "A" | "AAAA",
  options: { signal: AbortSignal },
): Promise<string[]> {
  return Deno.resolveDns(hostname, type, options);
}

/**
 * Every address of `hostname` must be public (`isAllowed`); a name without any is refused too.
 * Returns the addresses, the only ones the fetch may then connect to.
 */
async function requirePublicHost(
  hostname: string,
  resolve: ResolveAddresses,
  signal: AbortSignal,
  isAllowed: (address: string) => boolean,
): Promise<string[]> {
  const addresses = isIpLiteral(hostname)
    ? [hostname]
    : await resolveAll(hostname, resolve, signal);
  if (addresses.length === 0) throw new ClientMetadataError("the host does not resolve");
  if (!addresses.every(isAllowed)) {
    throw new ClientMetadataError("the host resolves to a private or reserved address");
  }
  return addresses;
}

async function resolveAll(
  hostname: string,
  resolve: ResolveAddresses,
  signal: AbortSignal,
): Promise<string[]> {
  const answers = await Promise.allSettled([
    resolve(hostname, "A", { signal }),
    resolve(hostname, "AAAA", { signal }),
  ]);
  if (signal.aborted) throw signal.reason;
  // Fail closed: a lookup that failed (rather than found no record) may hide the private address
  // that fetch's own lookup then connects to.
  if (answers.some((answer) => answer.status === "rejected" && !isNoRecord(answer.reason))) {
    throw new ClientMetadataError("the host's addresses could not be resolved");
  }
  return answers.flatMap((answer) => answer.status === "fulfilled" ? answer.value : []);
}

/** Deno.resolveDns's answer for a name without records of the asked type. */
function isNoRecord(error: unknown): boolean {
  return error instanceof Deno.errors.NotFound;
}

async function readDocument(response: Response, maxBytes: number): Promise<FetchedDocument> {
  if (response.status !== 200) {
    await response.body?.cancel();
    throw new ClientMetadataError(
      response.status >= 300 && response.status < 400
        ? "the document URL redirects; redirects are not followed"
        : `the document URL answered HTTP ${response.status}`,
    );
  }
  const mediaType = mediaTypeOf(response.headers.get("content-type"));
  if (!isJsonMediaType(mediaType)) {
    await response.body?.cancel();
    throw new ClientMetadataError(
      `the document is not served as application/json (Content-Type: ${shown(mediaType)})`,
    );
  }
  if (Number(response.headers.get("content-length") ?? 0) > maxBytes) {
    await response.body?.cancel();
    throw tooLarge(maxBytes);
  }
  return {
    body: await readCapped(response.body, maxBytes),
    maxAgeSeconds: maxAge(response.headers.get("cache-control")),
  };
}

/** The media type of a Content-Type header, without parameters, in lower case. */
function mediaTypeOf(contentType: string | null): string {
  return (contentType ?? "").split(";")[0].trim().toLowerCase();
}

/**
 * `application/json` or a more specific `application/…+json`: the draft's "MUST treat all other
 * … content types as an error response" (a page or a text file that happens to hold the JSON is
 * no document the client published as one).
 */
function isJsonMediaType(mediaType: string): boolean {
  return mediaType === "application/json" ||
    /^application\/[a-z0-9!#$&^_.-]+\+json$/.test(mediaType);
}

/** A media type fit to quote in an error description (the server chose it). */
function shown(mediaType: string): string {
  if (mediaType === "") return "none";
  return /^[a-z0-9!#$&^_.+-]{1,60}\/[a-z0-9!#$&^_.+-]{1,60}$/.test(mediaType)
    ? mediaType
    : "unusable";
}

async function readCapped(
  body: ReadableStream<Uint8Array<ArrayBuffer>> | null,
  maxBytes: number,
): Promise<string> {
  if (!body) return "";
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.byteLength;
    // Leaving the loop early cancels the stream.
    if (size > maxBytes) throw tooLarge(maxBytes);
    chunks.push(chunk);
  }
  const bytes = await new Blob(chunks).bytes();
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new ClientMetadataError("the document is not UTF-8 text");
  }
}

function maxAge(cacheControl: string | null): number | undefined {
  if (!cacheControl) return undefined;
  if (/(^|[\s,])(no-store|no-cache)([\s,=]|$)/i.test(cacheControl)) return 0;
  const match = cacheControl.match(/(?:^|[\s,])max-age\s*=\s*"?(\d+)"?/i);
  return match ? Number(match[1]) : undefined;
}

function tooLarge(maxBytes: number): ClientMetadataError {
  return new ClientMetadataError(`the document is larger than ${maxBytes} bytes`);
}
