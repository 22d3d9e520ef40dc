/** Request parameters and bodies, read with limits. */

import { joinChunks } from "./bytes.ts";
import { OAuthError } from "./errors.ts";
import { firstDuplicateName } from "./json_duplicates.ts";

/** Bodies larger than this are refused with 413. */
export const MAX_BODY_BYTES = 64 * 1024;

/**
 * The longest query parameter accepted: longer than any OAuth parameter needs, and it keeps
 * what /authorize stores from its query (client_id, state, redirect_uri, code_challenge) well
 * under Deno KV's 64 KiB value limit. Bodies have their own limit (MAX_BODY_BYTES); a form
 * endpoint that stores or logs what its body says holds its parameters to this one too
 * (withinParameterLength).
 */
export const MAX_QUERY_PARAMETER_LENGTH = 4096;

/**
 * Query parameters as a map, refusing a parameter sent more than once (RFC 6749 §3.1: "Request
 * and response parameters MUST NOT be included more than once") or longer than
 * MAX_QUERY_PARAMETER_LENGTH.
 */
export function singleValued(params: URLSearchParams): Map<string, string> {
  return uniqueParams(params, MAX_QUERY_PARAMETER_LENGTH);
}

function uniqueParams(params: URLSearchParams, maxLength: number): Map<string, string> {
  const map = new Map<string, string>();
  for (const [name, value] of params) {
    if (map.has(name)) throw new OAuthError(400, "invalid_request", `Repeated parameter: ${name}`);
    if (value.length > maxLength) throw tooLong(name, maxLength);
    map.set(name, value);
  }
  return map;
}

/**
 * `params` when no value is longer than MAX_QUERY_PARAMETER_LENGTH, else 400 `invalid_request`
 * (RFC 6749 §5.2), as a query parameter that long is refused: for a body's parameters that the
 * endpoint stores or logs, which its 64 KiB limit alone would let through.
 */
export function withinParameterLength<P extends ReadonlyMap<string, string>>(params: P): P {
  for (const [name, value] of params) {
    if (value.length > MAX_QUERY_PARAMETER_LENGTH) {
      throw tooLong(name, MAX_QUERY_PARAMETER_LENGTH);
    }
  }
  return params;
}

function tooLong(name: string, maxLength: number): OAuthError {
  return new OAuthError(
    400,
    "invalid_request",
    `Parameter ${name.slice(0, 64)} exceeds ${maxLength} characters`,
  );
}

/**
 * Reads a form-encoded or JSON object body into single-valued string parameters. JSON values
 * must be strings (numbers and booleans are not OAuth parameters). A body not received within
 * `timeoutMs` answers 408 (REQUEST_BODY_TIMEOUT_MS).
 */
export async function readParams(
  request: Request,
  timeoutMs: number,
): Promise<Map<string, string>> {
  const type = (request.headers.get("content-type") ?? "").split(";")[0].trim().toLowerCase();
  if (type !== "application/x-www-form-urlencoded" && type !== "application/json") {
    throw new OAuthError(
      400,
      "invalid_request",
      "Content-Type must be application/x-www-form-urlencoded or application/json",
    );
  }
  const text = await readLimitedText(request, timeoutMs);
  if (type === "application/x-www-form-urlencoded") {
    return uniqueParams(new URLSearchParams(text), Infinity);
  }
  return paramsFromJson(text);
}

/**
 * The parameters that have a value: at the token endpoint one sent without a value is as if
 * omitted (RFC 6749 §3.2), so `client_secret=` from a public client is no secret, and
 * `resource=` names no resource.
 */
export function withValues(params: ReadonlyMap<string, string>): Map<string, string> {
  return new Map([...params].filter(([, value]) => value !== ""));
}

/** Reads an `application/json` body of any shape (validated by the caller), as readParams. */
export async function readJson(request: Request, timeoutMs: number): Promise<unknown> {
  const type = (request.headers.get("content-type") ?? "").split(";")[0].trim().toLowerCase();
  if (type !== "application/json") {
    throw new OAuthError(400, "invalid_request", "Content-Type must be application/json");
  }
  return parseJson(await readLimitedText(request, timeoutMs));
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new OAuthError(400, "invalid_request", "Malformed JSON body");
  }
}

function paramsFromJson(text: string): Map<string, string> {
  const body = parseJson(text);
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new OAuthError(400, "invalid_request", "JSON body must be an object");
  }
  const map = new Map<string, string>();
  for (const [name, value] of Object.entries(body)) {
    if (value === null || value === undefined) continue;
    if (typeof value !== "string") {
      throw new OAuthError(400, "invalid_request", `Parameter ${name} must be a string`);
    }
    map.set(name, value);
  }
  // JSON.parse keeps the last of a repeated member silently: refused as in a form (RFC 6749
  // §3.1), so that a reader of the first and the service never disagree on one request.
  const repeated = firstDuplicateName(text);
  if (repeated !== undefined) {
    throw new OAuthError(400, "invalid_request", `Repeated parameter: ${repeated.slice(0, 64)}`);
  }
  return map;
}

async function readLimitedText(request: Request, timeoutMs: number): Promise<string> {
  const length = request.headers.get("content-length");
  if (Number(length ?? "0") > MAX_BODY_BYTES) throw tooLarge();
  const bytes = length === null
    ? await readChunks(request, timeoutMs)
    : await readDeclared(request, timeoutMs);
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new OAuthError(400, "invalid_request", "Body is not valid UTF-8");
  }
}

/**
 * A body of declared length, read natively in one go: the HTTP server holds the client to that
 * length, and a grant is spared the stream reader and its promise per chunk (a few percent of a
 * refresh's CPU). A body longer than declared (a Request built in-process) is still refused.
 */
async function readDeclared(request: Request, timeoutMs: number): Promise<Uint8Array> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const bytes = await new Promise<Uint8Array>((resolve, reject) => {
      // A client that trickles its body would hold the request (and its connection) forever.
      timer = setTimeout(() => reject(bodyTimeout(timeoutMs)), timeoutMs);
      request.bytes().then(resolve, () => reject(unreadableBody()));
    });
    if (bytes.byteLength > MAX_BODY_BYTES) throw tooLarge();
    return bytes;
  } finally {
    clearTimeout(timer);
  }
}

/** A body of unknown length, read chunk by chunk up to MAX_BODY_BYTES. */
async function readChunks(request: Request, timeoutMs: number): Promise<Uint8Array> {
  if (!request.body) return new Uint8Array();
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = request.body.getReader();
  // A client that trickles its body would hold the request (and its connection) forever.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(bodyTimeout(timeoutMs)), timeoutMs);
  });
  try {
    for (;;) {
      const { done, value } = await Promise.race([reader.read(), timedOut]);
      if (done) break;
      size += value.byteLength;
      if (size > MAX_BODY_BYTES) throw tooLarge();
      chunks.push(value);
    }
  } catch (error) {
    reader.cancel().catch(() => {});
    if (error instanceof OAuthError) throw error;
    throw unreadableBody();
  } finally {
    clearTimeout(timer);
  }
  return joinChunks(chunks, size);
}

function unreadableBody(): OAuthError {
  return new OAuthError(400, "invalid_request", "Could not read the request body");
}

/**
 * The client did not send its body in time: the request is abandoned, and the connection is not
 * kept for another one (what is left of the body would be read as the next request).
 */
function bodyTimeout(timeoutMs: number): OAuthError {
  return new OAuthError(
    408,
    "invalid_request",
    `Request body not received within ${timeoutMs} ms`,
    { "Connection": "close" },
  );
}

function tooLarge(): OAuthError {
  return new OAuthError(413, "invalid_request", `Request body exceeds ${MAX_BODY_BYTES} bytes`);
}
