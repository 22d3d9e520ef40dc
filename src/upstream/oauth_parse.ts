/**
 * Reading upstream answers: the body read once, JSON objects, the token response (RFC 6749
 * §5.1) and the small checks each field needs. Every failure is a transient `UpstreamError`
 * with a fixed description of ours; nothing of the body is repeated.
 */

import { readUpTo, UTF8 } from "../http/bytes.ts";
import type { UpstreamTokens } from "./types.ts";
import { UpstreamError } from "./types.ts";

/** The error for an answer that does not have the shape we expect. */
export function malformed(what: string): UpstreamError {
  return new UpstreamError("transient", "malformed", `upstream ${what} response is malformed`);
}

/** Maps what fetch or a body read threw; the cause's own text is left out on purpose. */
export function transportError(error: unknown): UpstreamError {
  if (error instanceof UpstreamError) return error;
  if (
    error instanceof DOMException &&
    (error.name === "TimeoutError" || error.name === "AbortError")
  ) {
    return new UpstreamError("transient", "timeout", "upstream request timed out");
  }
  return new UpstreamError("transient", "network", "upstream could not be reached");
}

/** Largest upstream answer read: GitLab's are a few hundred bytes; a larger one is refused. */
export const MAX_UPSTREAM_BODY_BYTES = 1024 * 1024;
/**
 * Longest token or code taken (GitLab's are under 100 characters): records hold several of them
 * and a store value is at most 64 KiB, so a longer one would fail the write that keeps it.
 */
export const MAX_UPSTREAM_VALUE_CHARS = 4096;
/** Longest lifetime taken from an upstream token's `expires_in` (GitLab's are two hours). */
const MAX_TOKEN_LIFETIME_SECONDS = 366 * 24 * 3600;

/**
 * The whole body, up to MAX_UPSTREAM_BODY_BYTES (a hostile or broken upstream could otherwise
 * fill the memory); a failure while reading is a transport error.
 */
export async function readBody(response: Response): Promise<string> {
  try {
    if (Number(response.headers.get("content-length") ?? 0) > MAX_UPSTREAM_BODY_BYTES) {
      await response.body?.cancel();
      throw tooLarge();
    }
    if (!response.body) return "";
    const read = await readUpTo(response.body, MAX_UPSTREAM_BODY_BYTES);
    if (read instanceof Uint8Array) return UTF8.decode(read);
    await read.cancel();
    throw tooLarge();
  } catch (error) {
    throw transportError(error);
  }
}

function tooLarge(): UpstreamError {
  return new UpstreamError("transient", "malformed", "upstream response is too large");
}

export function parseJson(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

export function parseJsonObject(body: string, what: string): Record<string, unknown> {
  const json = parseJson(body);
  if (!isObject(json)) throw malformed(what);
  return json;
}

/** A successful token response's tokens (RFC 6749 §5.1): a Bearer access token at least. */
export function parseTokens(body: string): UpstreamTokens {
  const json = parseJsonObject(body, "token");
  const accessToken = requireVsChars(json.access_token, "token");
  const tokenType = optional(json.token_type);
  if (
    tokenType !== undefined &&
    (typeof tokenType !== "string" || tokenType.toLowerCase() !== "bearer")
  ) {
    throw malformed("token");
  }
  const refreshToken = optional(json.refresh_token);
  const expiresIn = optional(json.expires_in);
  return {
    accessToken,
    refreshToken: refreshToken === undefined || refreshToken === ""
      ? ""
      : requireVsChars(refreshToken, "token"),
    ...(expiresIn === undefined ? {} : {
      // A lifetime of centuries would never be refreshed: taken as at most a year.
      expiresInSeconds: Math.min(
        requireNonNegativeNumber(expiresIn, "token"),
        MAX_TOKEN_LIFETIME_SECONDS,
      ),
    }),
  };
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `null` and absent are the same to us. */
export function optional(value: unknown): unknown {
  return value === null ? undefined : value;
}

export function requireNonEmptyString(value: unknown, what: string): string {
  if (typeof value !== "string" || value === "") throw malformed(what);
  return value;
}

/**
 * A token or code (RFC 6749 Appendix A, RFC 8628 §6.1: `1*VSCHAR`, printable ASCII) of at most
 * MAX_UPSTREAM_VALUE_CHARS.
 */
export function requireVsChars(value: unknown, what: string): string {
  const text = requireNonEmptyString(value, what);
  if (text.length > MAX_UPSTREAM_VALUE_CHARS || !/^[\x20-\x7e]+$/.test(text)) {
    throw malformed(what);
  }
  return text;
}

export function requirePositiveNumber(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) throw malformed(what);
  return value;
}

export function requireNonNegativeNumber(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) throw malformed(what);
  return value;
}
