/**
 * A POST body read whole, within a size limit and a time limit, so the gateway can read its
 * JSON-RPC message and forward the very same bytes.
 */

import { joinChunks } from "../http/bytes.ts";
import { OAuthError } from "../http/errors.ts";
import type { Deadline } from "./deadlines.ts";

/**
 * The largest MCP POST body the gateway takes: tool arguments may carry whole files, so far
 * above the OAuth endpoints' 64 KiB, yet bounded (the body is held in memory).
 */
export const MAX_MCP_BODY_BYTES = 4 * 1024 * 1024;

/** What limits the read in time. */
type ReadDeadline = Pick<Deadline, "whenExpired">;

/**
 * The body's bytes, `declared` its Content-Length; 413 past `MAX_MCP_BODY_BYTES`, 408 when
 * `deadline` expires first.
 */
export function readBoundedBody(
  request: Request,
  declared: string | undefined,
  deadline: ReadDeadline,
): Promise<Uint8Array<ArrayBuffer>> {
  if (declared !== undefined && Number(declared) > MAX_MCP_BODY_BYTES) {
    return Promise.reject(tooLarge());
  }
  // With a declared length the body cannot grow past it: read natively, in one go (without
  // asking for `request.body` first, which would build a stream object per request).
  if (declared !== undefined) return within(request.bytes(), deadline);
  return readUndeclared(request, deadline);
}

async function readUndeclared(
  request: Request,
  deadline: ReadDeadline,
): Promise<Uint8Array<ArrayBuffer>> {
  try {
    if (!request.body) return new Uint8Array();
    return await readChunks(request.body, expiryOf(deadline));
  } catch (error) {
    throw asBodyError(error);
  }
}

function asBodyError(error: unknown): OAuthError {
  if (error instanceof OAuthError) return error;
  return new OAuthError(400, "invalid_request", "Could not read the request body");
}

/**
 * `read`'s outcome (a failure as 400), or 408 when `deadline` expires first: one promise per
 * request on the gateway's hot path (a race would add two more promises and a rejection
 * handler). An expiry after the read settled rejects a settled promise, which does nothing.
 */
function within<T>(read: Promise<T>, deadline: ReadDeadline): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    deadline.whenExpired(() => reject(bodyTimeout()));
    read.then(resolve, (error) => reject(asBodyError(error)));
  });
}

async function readChunks(
  body: ReadableStream<Uint8Array>,
  aborted: Promise<never>,
): Promise<Uint8Array<ArrayBuffer>> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await Promise.race([reader.read(), aborted]);
      if (done) break;
      size += value.byteLength;
      if (size > MAX_MCP_BODY_BYTES) throw tooLarge();
      chunks.push(value);
    }
  } catch (error) {
    reader.cancel().catch(() => {});
    throw error;
  }
  return joinChunks(chunks, size);
}

/** A promise rejected with 408 when `deadline` expires. */
function expiryOf(deadline: ReadDeadline): Promise<never> {
  const expired = new Promise<never>((_, reject) => {
    deadline.whenExpired(() => reject(bodyTimeout()));
  });
  expired.catch(() => {});
  return expired;
}

/** Not kept alive: what is left of the body would be read as the next request. */
function bodyTimeout(): OAuthError {
  return new OAuthError(408, "invalid_request", "Request body not received in time", {
    "Connection": "close",
  });
}

function tooLarge(): OAuthError {
  return new OAuthError(
    413,
    "invalid_request",
    `Request body exceeds ${MAX_MCP_BODY_BYTES} bytes`,
  );
}
